package coord_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gigafactory/fleet/shared/coord"
	"github.com/gigafactory/fleet/shared/fleet"
)

// The operator actions the console offers (fleet.OperatorActions, read
// from its stage machine document) are the ones Act takes.
func TestParseActionTakesTheOperatorActions(t *testing.T) {
	t.Parallel()
	for _, a := range fleet.OperatorActions {
		got, err := coord.ParseAction(a.Name)
		require.NoError(t, err, a.Name)
		require.Equal(t, coord.Action(a.Name), got)
	}
	_, err := coord.ParseAction("lintpass")
	require.Error(t, err)
}
