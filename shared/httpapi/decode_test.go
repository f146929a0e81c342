package httpapi

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestPrefersMinimal(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		prefer []string
		want   bool
	}{
		{nil, false},
		{[]string{"return=minimal"}, true},
		{[]string{"Return = \"Minimal\""}, true},
		{[]string{"respond-async, return=minimal; foo=bar"}, true},
		{[]string{"handling=lenient", "return=minimal"}, true},
		{[]string{"return=representation"}, false},
		{[]string{"return=representation, return=minimal"}, false}, // the first one counts
		{[]string{"return=minimal", "return=representation"}, true},
		{[]string{"minimal"}, false},
		{[]string{"return-minimal"}, false},
	} {
		r := httptest.NewRequest(http.MethodPatch, "/api/fleet/jobs/j1", nil)
		for _, v := range tc.prefer {
			r.Header.Add("Prefer", v)
		}
		require.Equal(t, tc.want, prefersMinimal(r), "%q", tc.prefer)
	}
}
