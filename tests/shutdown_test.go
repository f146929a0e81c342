package tests

import (
	"bufio"
	"context"
	"net/http"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestStackStopsWithStreamsOpen: Ctrl-C (SIGINT) of the local stack with a
// console tab or fleetctl top open (the product's event stream, a job's
// event stream) stops it within 2 s: the streams end on shutdown instead
// of holding it until their time limit.
func TestStackStopsWithStreamsOpen(t *testing.T) {
	t.Parallel()
	s := startStack(t)
	s.Product("demo", "app")
	job := s.Submit("demo", "---\ntitle: Watched\nrepo: app\ncapabilities: [gpu:none]\n---\nWait.\n")
	ended := make(chan error, 2)
	for _, path := range []string{"/events/stream", "/jobs/" + job + "/events/stream"} {
		req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, s.API+path, nil)
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+s.Token)
		req.Header.Set("X-Product-Id", "demo")
		req.Header.Set("Accept", "text/event-stream")
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, resp.StatusCode, path)
		t.Cleanup(func() { _ = resp.Body.Close() })
		go func() {
			sc := bufio.NewScanner(resp.Body)
			for sc.Scan() {
			}
			ended <- sc.Err()
		}()
	}

	began := time.Now()
	require.NoError(t, s.cmd.Process.Signal(syscall.SIGINT))
	done := make(chan error, 1)
	go func() { done <- s.cmd.Wait() }()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	select {
	case err := <-done:
		require.NoError(t, err, "the stack exits cleanly")
	case <-ctx.Done():
		t.Fatalf("the stack did not stop within 20s of SIGINT with streams open")
	}
	took := time.Since(began)
	t.Logf("stopped %s after SIGINT", took)
	require.Less(t, took, 2*time.Second, "Ctrl-C with streams open stops the stack within 2 s")
	for range 2 {
		select {
		case <-ended:
		case <-time.After(2 * time.Second):
			t.Fatal("a stream did not end with the stack")
		}
	}
}
