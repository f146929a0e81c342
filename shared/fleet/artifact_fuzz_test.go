package fleet_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gigafactory/fleet/shared/fleet"
)

// FuzzArtifactID: an artifact id locates its job's partition from the id
// alone, so whatever id a client sends either is refused or splits into a
// valid job id and suffix that join back to it.
func FuzzArtifactID(f *testing.F) {
	for _, s := range []string{"", ".", "j1.", ".a1", "j1.a1", "j1.a.b", "j1..a", "../x.y", "j1.a\x00", strings.Repeat("j", 300) + ".a"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, id string) {
		job, ok := fleet.ArtifactJobID(id)
		if !ok {
			require.Empty(t, job)
			return
		}
		require.NoError(t, fleet.ValidateName("id", id))
		require.NoError(t, fleet.ValidateName("jobId", job))
		require.NotContains(t, job, ".")
		suffix := strings.TrimPrefix(id, job+".")
		require.NotEmpty(t, suffix)
		require.Equal(t, id, fleet.ArtifactID(job, suffix))
	})
}

// FuzzArtifactContentType: a content type sent with artifact bytes is
// refused with a field-naming 400 or stored in a canonical form that
// normalizes to itself (what GET .../content answers is what was stored).
func FuzzArtifactContentType(f *testing.F) {
	for _, s := range []string{"", " ", "text/plain", "text/plain; charset=utf-8", "TEXT/HTML;CHARSET=\"UTF-8\"", "a/b; x=\"\\\"\"", "text/", "x/y; a=1; a=2", "application/json\r\nX: y"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, ct string) {
		got, err := fleet.NormalizeContentType("contentType", ct)
		if err != nil {
			require.Equal(t, fleet.CodeInvalid, fleet.CodeOf(err))
			return
		}
		require.NotEmpty(t, got)
		again, err := fleet.NormalizeContentType("contentType", got)
		require.NoError(t, err)
		require.Equal(t, got, again)
		require.NotContainsf(t, got, "\n", "a header value")
	})
}
