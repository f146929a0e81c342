package gitwt_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gigafactory/fleet/infra/factory/internal/gitwt"
	"github.com/gigafactory/fleet/shared/fleet"
)

// TestParseShortstat: git leaves out the parts that are zero, and prints
// nothing for no change.
func TestParseShortstat(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in   string
		want fleet.DiffStat
	}{
		{"", fleet.DiffStat{}},
		{" 1 file changed, 1 insertion(+)", fleet.DiffStat{Files: 1, Insertions: 1}},
		{" 2 files changed, 10 insertions(+), 3 deletions(-)", fleet.DiffStat{Files: 2, Insertions: 10, Deletions: 3}},
		{" 3 files changed, 7 deletions(-)", fleet.DiffStat{Files: 3, Deletions: 7}},
	} {
		require.Equal(t, tc.want, gitwt.ParseShortstat(tc.in), tc.in)
	}
}
