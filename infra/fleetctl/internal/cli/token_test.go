package cli

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestTokenSources: the operator token comes from FLEET_TOKEN or from a
// file (--token-file, FLEET_TOKEN_FILE), trimmed, never from both; a file
// that cannot be read or holds nothing is refused naming the setting,
// before anything is sent.
func TestTokenSources(t *testing.T) {
	t.Parallel()
	var sent atomic.Value
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sent.Store(r.Header.Get("Authorization"))
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"items":[]}`))
	}))
	t.Cleanup(srv.Close)
	dir := t.TempDir()
	good, empty := filepath.Join(dir, "token"), filepath.Join(dir, "empty")
	require.NoError(t, os.WriteFile(good, []byte("op_from_file\n"), 0o600))
	require.NoError(t, os.WriteFile(empty, []byte("\n"), 0o600))
	tests := []struct {
		name string
		args []string
		env  map[string]string
		want string   // the bearer token sent
		err  []string // what stderr must name; exit 5 and nothing sent
	}{
		{name: "value", env: map[string]string{"FLEET_TOKEN": "op_value"}, want: "op_value"},
		{name: "the flag's file", args: []string{"--token-file", good}, want: "op_from_file"},
		{name: "the variable's file", env: map[string]string{"FLEET_TOKEN_FILE": good}, want: "op_from_file"},
		{name: "value and file", args: []string{"--token-file", good}, env: map[string]string{"FLEET_TOKEN": "op_value"},
			err: []string{"FLEET_TOKEN and --token-file (FLEET_TOKEN_FILE) are both set"}},
		{name: "empty file", env: map[string]string{"FLEET_TOKEN_FILE": empty}, err: []string{"--token-file (FLEET_TOKEN_FILE)", empty, "is empty"}},
		{name: "missing file", args: []string{"--token-file", filepath.Join(dir, "nope")}, err: []string{"--token-file (FLEET_TOKEN_FILE)", "nope"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// Not parallel: the server's last request is what is checked.
			sent.Store("")
			env := map[string]string{"FLEET_URL": srv.URL}
			for k, v := range tt.env {
				env[k] = v
			}
			var out, errb bytes.Buffer
			code := Run(context.Background(), append(tt.args, "factories", "ls"), Env{Stdin: strings.NewReader(""), Stdout: &out, Stderr: &errb,
				Getenv: func(k string) string { return env[k] }})
			if tt.err == nil {
				require.Equal(t, ExitOK, code, errb.String())
				require.Equal(t, "Bearer "+tt.want, sent.Load())
				return
			}
			require.Equal(t, ExitAuth, code, errb.String())
			for _, s := range tt.err {
				require.Contains(t, errb.String(), s)
			}
			require.NotContains(t, errb.String(), "op_from_file")
			require.Empty(t, sent.Load(), "nothing is sent without a token")
		})
	}
}
