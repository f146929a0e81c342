package fleet_test

import (
	"errors"
	"fmt"
	"io"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gigafactory/fleet/shared/fleet"
)

func TestErrorIsMatchesByCode(t *testing.T) {
	t.Parallel()
	sentinels := map[fleet.Code]error{
		fleet.CodeInvalid: fleet.ErrInvalid, fleet.CodeForbidden: fleet.ErrForbidden,
		fleet.CodeNotFound: fleet.ErrNotFound, fleet.CodeConflict: fleet.ErrConflict,
		fleet.CodeFenced: fleet.ErrFenced, fleet.CodeTooLarge: fleet.ErrTooLarge,
		fleet.CodeRepoNotOwned: fleet.ErrRepoNotOwned, fleet.CodeBudgetExceeded: fleet.ErrBudgetExceeded,
		fleet.CodePaused: fleet.ErrPaused, fleet.CodeUnavailable: fleet.ErrUnavailable,
	}
	for code, sentinel := range sentinels {
		err := fmt.Errorf("use case: %w", fleet.Errorf(code, "something about %s", "x"))
		for other, s := range sentinels {
			require.Equal(t, code == other, errors.Is(err, s), "%s is %s", code, other)
		}
		require.Equal(t, code, fleet.CodeOf(err))
		require.True(t, errors.Is(err, sentinel))
	}
	// Only sentinels (no message, no field) match by code.
	require.False(t, errors.Is(fleet.Errorf(fleet.CodeFenced, "a"), fleet.Errorf(fleet.CodeFenced, "b")))
	require.False(t, errors.Is(fleet.Invalid("x", "bad"), fleet.Invalid("x", "")))
}

func TestErrorText(t *testing.T) {
	t.Parallel()
	require.Equal(t, "invalid_argument: repo: is required", fleet.Invalid("repo", "is required").Error())
	require.Equal(t, "fenced: leaseEpoch 3 is stale", fleet.Errorf(fleet.CodeFenced, "leaseEpoch %d is stale", 3).Error())
}

func TestErrorUnwrapsCause(t *testing.T) {
	t.Parallel()
	err := &fleet.Error{Code: fleet.CodeUnavailable, Message: "store down", Err: io.ErrUnexpectedEOF}
	require.ErrorIs(t, err, io.ErrUnexpectedEOF)
	require.ErrorIs(t, err, fleet.ErrUnavailable)
}

func TestCodeOf(t *testing.T) {
	t.Parallel()
	require.Equal(t, fleet.Code(""), fleet.CodeOf(nil))
	require.Equal(t, fleet.Code(""), fleet.CodeOf(io.EOF))
	require.Equal(t, fleet.CodeTooLarge, fleet.CodeOf(fmt.Errorf("a: %w", fmt.Errorf("b: %w", fleet.ErrTooLarge))))
	_, err := fleet.CheckTransition(fleet.StageShipped, fleet.StageBuilding, fleet.ActorFactory)
	require.Equal(t, fleet.CodeConflict, fleet.CodeOf(err))
}
