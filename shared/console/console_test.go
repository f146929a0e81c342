package console

import (
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestMountServesConsoleAndPassesTheRestToTheAPI(t *testing.T) {
	t.Parallel()
	api := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "api "+r.URL.Path) })
	srv := httptest.NewServer(Mount(api))
	t.Cleanup(srv.Close)
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	for _, tt := range []struct {
		method, path string
		status       int
		ctype, body  string
	}{
		{"GET", "/api/console/", 200, "text/html; charset=utf-8", "<title>Fleet console</title>"},
		{"GET", "/api/console/index.html", 200, "text/html; charset=utf-8", "app.js"},
		{"GET", "/api/console/app.js", 200, "text/javascript; charset=utf-8", "sessionStorage"},
		{"GET", "/api/console/console.css", 200, "text/css; charset=utf-8", ":root"},
		{"GET", "/api/console", 302, "", ""},
		{"GET", "/api/console/nope.js", 404, "", ""},
		{"POST", "/api/console/", 405, "", ""},
		{"GET", "/api/fleet/jobs", 200, "", "api /api/fleet/jobs"},
		{"GET", "/api/consoles", 200, "", "api /api/consoles"},
	} {
		req, err := http.NewRequest(tt.method, srv.URL+tt.path, nil)
		require.NoError(t, err)
		resp, err := noRedirect.Do(req)
		require.NoError(t, err)
		b, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		require.Equal(t, tt.status, resp.StatusCode, "%s %s", tt.method, tt.path)
		if tt.ctype != "" {
			require.Equal(t, tt.ctype, resp.Header.Get("Content-Type"), tt.path)
			require.Contains(t, resp.Header.Get("Content-Security-Policy"), "default-src 'none'", tt.path)
			require.Equal(t, "nosniff", resp.Header.Get("X-Content-Type-Options"))
		}
		require.Contains(t, string(b), tt.body, "%s %s", tt.method, tt.path)
		if tt.status == 302 {
			require.Equal(t, Prefix, resp.Header.Get("Location"))
		}
	}
}

func TestETagRevalidates(t *testing.T) {
	t.Parallel()
	h := New()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", Prefix+"app.js", nil))
	etag := rec.Header().Get("ETag")
	require.NotEmpty(t, etag)
	req := httptest.NewRequest("GET", Prefix+"app.js", nil)
	req.Header.Set("If-None-Match", etag)
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	require.Equal(t, http.StatusNotModified, rec.Code)
}

// The console must work offline: no asset loads anything from another
// origin, and the token never goes into a URL.
func TestAssetsAreSelfContained(t *testing.T) {
	t.Parallel()
	external := regexp.MustCompile(`(?i)(src|href)\s*=\s*["']?(https?:)?//|@import\s+url\(|https?://`)
	require.NoError(t, fs.WalkDir(assets, "assets", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := fs.ReadFile(assets, p)
		require.NoError(t, err)
		require.False(t, external.Match(b), "%s refers to another origin: %s", p, external.Find(b))
		require.NotContains(t, string(b), "?token=", p)
		require.NotContains(t, strings.ToLower(string(b)), "console.log", "%s logs (the token must never reach a log)", p)
		return nil
	}))
}
