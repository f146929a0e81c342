// Package console is the fleet's web console: a browser control plane over
// the /api/fleet routes, as static files embedded in the binary and served
// under /api/console/ by the same handler as the API (so the Functions app,
// the local stack and the Lambda front door all have it, at the same path,
// through the Functions host's /api route prefix).
//
// The files hold no secret and need no token: the page asks for the
// operator token, keeps it in sessionStorage (never in a URL, never logged)
// and sends it as a bearer header on every API call. Nothing is fetched
// from anywhere but this origin (the Content-Security-Policy says so), so
// the console works offline.
//
// Beside the files it serves the stage machine (StagesFile), built from
// package fleet when the handler is made: the page keeps no copy of it.
package console

import (
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"encoding/json"
	"io/fs"
	"mime"
	"net/http"
	"path"
	"strings"

	"github.com/gigafactory/fleet/shared/fleet"
)

// Prefix is where the console is served.
const Prefix = "/api/console/"

//go:embed assets
var assets embed.FS

// csp allows this origin only: scripts, styles, API calls and images.
const csp = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; " +
	"form-action 'none'; frame-ancestors 'none'; base-uri 'none'"

type file struct {
	body  []byte
	ctype string
	etag  string
}

// Handler serves the console's files below Prefix.
type Handler struct {
	files map[string]file
}

// New loads the embedded files, and the stage machine of package fleet as
// StagesFile.
func New() *Handler {
	return newHandler(stageMachine(fleet.Stages, fleet.Transitions, fleet.OperatorActions))
}

// newHandler serves the embedded files and m as StagesFile.
func newHandler(m machine) *Handler {
	h := &Handler{files: map[string]file{}}
	sub, _ := fs.Sub(assets, "assets")
	_ = fs.WalkDir(sub, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := fs.ReadFile(sub, p)
		if err != nil {
			return err
		}
		h.add(p, b)
		return nil
	})
	b, err := json.Marshal(m)
	if err != nil {
		panic("console: encode the stage machine: " + err.Error()) // plain strings: cannot fail
	}
	h.add(StagesFile, b)
	return h
}

// add serves body as name, typed by its extension.
func (h *Handler) add(name string, body []byte) {
	sum := sha256.Sum256(body)
	ctype := mime.TypeByExtension(path.Ext(name))
	if ctype == "" {
		ctype = "application/octet-stream"
	}
	h.files[name] = file{body: body, ctype: ctype, etag: `"` + hex.EncodeToString(sum[:8]) + `"`}
}

func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	name := strings.TrimPrefix(r.URL.Path, Prefix)
	if name == "" {
		name = "index.html"
	}
	f, ok := h.files[name]
	if !ok {
		http.NotFound(w, r)
		return
	}
	hd := w.Header()
	hd.Set("Content-Type", f.ctype)
	hd.Set("X-Content-Type-Options", "nosniff")
	hd.Set("Content-Security-Policy", csp)
	hd.Set("Referrer-Policy", "no-referrer")
	hd.Set("X-Frame-Options", "DENY")
	// Revalidate every time: the files change with the binary, and a 304
	// costs nothing.
	hd.Set("Cache-Control", "no-cache")
	hd.Set("ETag", f.etag)
	if r.Header.Get("If-None-Match") == f.etag {
		w.WriteHeader(http.StatusNotModified)
		return
	}
	if r.Method == http.MethodHead {
		return
	}
	_, _ = w.Write(f.body)
}

// Mount serves the console below Prefix (and redirects the bare
// /api/console to it) and everything else with api.
func Mount(api http.Handler) http.Handler {
	c := New()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case strings.HasPrefix(r.URL.Path, Prefix):
			c.ServeHTTP(w, r)
		case r.URL.Path == strings.TrimSuffix(Prefix, "/"):
			http.Redirect(w, r, Prefix, http.StatusFound)
		default:
			api.ServeHTTP(w, r)
		}
	})
}
