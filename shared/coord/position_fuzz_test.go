package coord_test

import (
	"testing"
	"time"

	"github.com/gigafactory/fleet/shared/coord/live"

	"github.com/stretchr/testify/require"
)

// FuzzParsePosition: any stream id a client sends back either is refused
// with ErrBadPosition or is a position whose id reads back as itself, so a
// resumed stream resumes exactly where the id says.
func FuzzParsePosition(f *testing.F) {
	for _, s := range []string{"", "p2.", "p2.e30", live.Position{Jobs: "1", Factories: "2"}.String(),
		live.Position{Jobs: "a\nb", Factories: "\x00", At: time.Date(2026, 11, 26, 1, 2, 3, 4, time.UTC)}.String(),
		"p1.eyJlIjoxLCJmIjoyfQ", "p2.eyJqIjoxLCJmIjoyfQ"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, id string) {
		p, err := live.ParsePosition(id)
		if err != nil {
			require.ErrorIs(t, err, live.ErrBadPosition)
			require.Equal(t, live.Position{}, p)
			return
		}
		require.NotEmpty(t, p.Jobs)
		require.NotEmpty(t, p.Factories)
		s := p.String()
		require.NotContains(t, s, "\n", "a stream id must fit on an SSE id line")
		again, err := live.ParsePosition(s)
		require.NoError(t, err)
		require.Equal(t, p, again)
	})
}
