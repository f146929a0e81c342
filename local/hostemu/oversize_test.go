package hostemu

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestForwardedOversizedBodyAlwaysGets413 sends a body over the handler's
// limit through the emulator many times. The handler answers 413 after
// reading its limit, before the emulator has sent the rest; the client must
// get that 413 every time, never a 502 made of the emulator's failed write.
func TestForwardedOversizedBodyAlwaysGets413(t *testing.T) {
	t.Parallel()
	t.Run("net/http handler", func(t *testing.T) {
		t.Parallel()
		oversizedThroughEmulator(t, netHTTPHandler(t))
	})
	t.Run("handler that resets the connection", func(t *testing.T) {
		t.Parallel()
		oversizedThroughEmulator(t, resettingHandler(t))
	})
}

// limit is the fake handlers' body limit.
const limit = 1 << 20

// netHTTPHandler is a net/http server refusing bodies over limit.
func netHTTPHandler(t *testing.T) string {
	t.Helper()
	// As the fleet API does: a declared length over the limit is refused
	// before reading anything, a longer body once the limit is read.
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ContentLength > limit {
			http.Error(w, `{"error":{"code":"too_large"}}`, http.StatusRequestEntityTooLarge)
			return
		}
		if _, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit)); err != nil {
			var tooBig *http.MaxBytesError
			if errors.As(err, &tooBig) {
				http.Error(w, `{"error":{"code":"too_large"}}`, http.StatusRequestEntityTooLarge)
				return
			}
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		w.WriteHeader(http.StatusCreated)
	})
	fake := httptest.NewServer(handler)
	t.Cleanup(fake.Close)
	return strings.TrimPrefix(fake.URL, "http://")
}

// resettingHandler answers every request 413 as soon as it has read the
// request's head, then closes at once with unread data, which resets the
// connection: the least patient handler there can be.
func resettingHandler(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				req, err := http.ReadRequest(bufio.NewReader(c))
				if err != nil {
					return
				}
				if req.ContentLength <= limit {
					_, _ = io.Copy(io.Discard, req.Body)
					_, _ = io.WriteString(c, "HTTP/1.1 201 Created\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
					return
				}
				_, _ = io.WriteString(c, "HTTP/1.1 413 Request Entity Too Large\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
				_ = c.(*net.TCPConn).SetLinger(0)
			}()
		}
	}()
	return ln.Addr().String()
}

// oversizedThroughEmulator sends oversized bodies through an emulator in
// front of the handler at addr, and one body within the limit.
func oversizedThroughEmulator(t *testing.T, addr string) {
	t.Helper()
	front := newHTTPFront("api", []*httpRoute{route(t, `{"route":"{*path}"}`, true)}, readyChild(addr))
	emu := httptest.NewServer(front)
	t.Cleanup(emu.Close)

	body := bytes.Repeat([]byte("m"), 2200*1024) // the 2.2 MB manifest of the report
	client := emu.Client()
	counts := map[int]int{}
	const tries = 200
	for i := range tries {
		req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, emu.URL+"/api/fleet/jobs", bytes.NewReader(body))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "text/markdown")
		if i%2 == 0 {
			// curl asks so for any body over 1 MiB.
			req.Header.Set("Expect", "100-continue")
		}
		resp, err := client.Do(req)
		require.NoError(t, err)
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		counts[resp.StatusCode]++
	}
	require.Equal(t, map[int]int{http.StatusRequestEntityTooLarge: tries}, counts, "status codes over %d tries", tries)

	// A body within the limit still reaches the handler whole.
	resp, err := client.Post(emu.URL+"/api/fleet/jobs", "text/markdown", bytes.NewReader(body[:limit]))
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusCreated, resp.StatusCode)
}
