package webhook

import (
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gigafactory/fleet/shared/coord"
)

// TestPost: the body and headers go as given; only a 2xx acknowledges, a
// redirect is not followed, and a refused connection is an error.
func TestPost(t *testing.T) {
	t.Parallel()
	var got []*http.Request
	var bodies []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got, bodies = append(got, r), append(bodies, string(b))
		switch r.URL.Path {
		case "/ok":
			w.WriteHeader(http.StatusNoContent)
		case "/moved":
			http.Redirect(w, r, "/ok", http.StatusFound)
		default:
			w.WriteHeader(http.StatusInternalServerError)
		}
	}))
	defer srv.Close()
	c := New(5 * time.Second)
	req := func(path string) coord.WebhookRequest {
		return coord.WebhookRequest{URL: srv.URL + path, Body: []byte(`{"seq":1}`), Headers: map[string]string{"X-Fleet-Event-Id": "j:1"}}
	}
	require.NoError(t, c.Post(t.Context(), req("/ok")))
	require.Equal(t, `{"seq":1}`, bodies[0])
	require.Equal(t, http.MethodPost, got[0].Method)
	require.Equal(t, "j:1", got[0].Header.Get("X-Fleet-Event-Id"))
	require.ErrorContains(t, c.Post(t.Context(), req("/fail")), "the webhook answered 500")
	require.ErrorContains(t, c.Post(t.Context(), req("/moved")), "the webhook answered 302")
	require.Len(t, got, 3, "the redirect was not followed")
	srv.Close()
	require.ErrorContains(t, c.Post(t.Context(), req("/ok")), "connection refused")
}
