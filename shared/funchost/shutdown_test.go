package funchost_test

import (
	"context"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gigafactory/fleet/shared/funchost"
)

// TestShutdownClosesUnusedConnections: a connection that never sent a
// request does not hold Shutdown. net/http takes one for busy until it is
// 5 s old, and a client's pool opens such spare connections under load, so
// a Ctrl-C of the local stack took 5 s more (TestStackStopsWithStreamsOpen
// failed once in CI that way).
func TestShutdownClosesUnusedConnections(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusNoContent)
	})}
	funchost.EndRequestsOnShutdown(srv, 10*time.Millisecond)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()

	unused, err := net.Dial("tcp", ln.Addr().String())
	require.NoError(t, err)
	defer unused.Close()
	// A request on a connection accepted after it: the server has taken
	// the unused one by the time this is answered.
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := client.Get("http://" + ln.Addr().String() + "/")
	require.NoError(t, err)
	resp.Body.Close()

	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Second)
	defer cancel()
	require.NoError(t, srv.Shutdown(ctx), "shutdown waited for a connection that never sent a request")
	require.ErrorIs(t, <-served, http.ErrServerClosed)
	_, err = unused.Read(make([]byte, 1))
	require.Error(t, err, "the unused connection is closed")
}
