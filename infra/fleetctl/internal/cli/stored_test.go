package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gigafactory/fleet/shared/fleet"
)

// storedAPI answers GET paths with the given values as JSON (anything else
// with {}): what a coordinator holding data stored before today's checks
// would answer, which the real API can no longer be made to store.
func storedAPI(t *testing.T, answers map[string]any) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		v, ok := answers[strings.TrimPrefix(r.URL.Path, "/api/fleet")]
		if !ok {
			v = map[string]any{}
		}
		_ = json.NewEncoder(w).Encode(v)
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// runAt runs fleetctl against url and returns its stdout.
func runAt(t *testing.T, url string, args ...string) string {
	t.Helper()
	var out, errb bytes.Buffer
	getenv := func(k string) string {
		return map[string]string{"FLEET_URL": url, "FLEET_TOKEN": opToken, "FLEET_PRODUCT": "demo"}[k]
	}
	code := Run(context.Background(), args, Env{Stdin: strings.NewReader(""), Stdout: &out, Stderr: &errb, Getenv: getenv})
	require.Zero(t, code, errb.String())
	return out.String()
}

// TestProfilesShowRemovesTerminalCommands: a body stored before bodies
// were checked is printed without the escapes another product's operator
// put in it, colours kept.
func TestProfilesShowRemovesTerminalCommands(t *testing.T) {
	t.Parallel()
	url := storedAPI(t, map[string]any{"/profiles/backend": map[string]any{"name": "backend", "version": 1,
		"body": "\x1b]52;c;Y3VybCBldmlsfHNo\x07\x1b[2J\x1b[1mBe careful.\x1b[0m\rok\n"}})
	out := runAt(t, url, "profiles", "show", "backend")
	require.Contains(t, out, "\n\x1b[1mBe careful.\x1b[0mok\n")
	require.NotContains(t, out, "]52")
	require.NotContains(t, out, "\x1b[2J")
	require.NotContains(t, out, "\r")
}

// TestStoredTextEscaped: a title, a failure reason and an event message
// stored before the API refused them (or an engine's reason, never
// refused) show escaped in tables, fields and event rows: no carriage
// return writes over the line, no bidi control reorders it, no newline
// forges a row, no escape reaches the terminal.
func TestStoredTextEscaped(t *testing.T) {
	t.Parallel()
	const id = "j0019cb73d32180000000000000001"
	title := "safe\rrm -rf ~ \u202egnp.exe\x1b]0;x\x07"
	job := map[string]any{"id": id, "productId": "demo", "title": title, "repo": "hello", "stage": "failed",
		"lastFailure": map[string]any{"reason": "boom\nforged: yes\u2066"}}
	url := storedAPI(t, map[string]any{
		"/jobs":                   map[string]any{"items": []any{job}},
		"/jobs/" + id:             job,
		"/jobs/" + id + "/events": map[string]any{"items": []any{map[string]any{"seq": 1, "type": "failed", "actor": "factory", "actorId": "f1\r", "message": title}}},
	})
	for _, args := range [][]string{{"jobs", "ls"}, {"jobs", "show", id}, {"jobs", "events", id}} {
		out := runAt(t, url, args...)
		require.Contains(t, out, `safe\x0drm -rf ~ \u202egnp.exe\x1b]0;x\x07`, args)
		for _, raw := range []string{"\r", "\u202e", "\u2066", "\x1b", "\x07"} {
			require.NotContains(t, out, raw, args)
		}
		if args[1] == "show" {
			require.Contains(t, out, `boom\nforged: yes\u2066`)
			require.NotContains(t, out, "\nforged:")
		}
	}
}

func TestDisplay(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ in, want string }{
		{"plain text, é, 日本", "plain text, é, 日本"},
		{"a\tb\nc\r\n", `a\tb\nc\x0d\n`},
		{"\x1b[31mred\x07\x7f", `\x1b[31mred\x07\x7f`},
		{"C1 \u009b and bidi \u202e\u2066\u200f", `C1 \u009b and bidi \u202e\u2066\u200f`},
	} {
		require.Equal(t, tc.want, display(tc.in), "%q", tc.in)
	}
	// jobs watch prints event rows itself, not through table.
	row := eventRow(fleet.Event{Type: "failed", Actor: "factory", ActorID: "f1\u202e", Message: "a\rb"})
	require.Equal(t, []string{"factory:f1\\u202e", `a\x0db`}, row[4:])
}
