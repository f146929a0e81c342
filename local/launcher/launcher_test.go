package launcher

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestReadPools(t *testing.T) {
	t.Parallel()
	write := func(t *testing.T, body string) string {
		t.Helper()
		p := filepath.Join(t.TempDir(), "pools.json")
		require.NoError(t, os.WriteFile(p, []byte(body), 0o644))
		return p
	}
	path := write(t, `{"linux": {"command": ["./bin/factory", "--once"], "tokenFile": "linux.token", "env": {"A": "b"}},
		"gpu": {"command": ["factory"], "tokenFile": "/abs/gpu.token", "maxExecutions": 3, "messagesPerExecution": 2,
		        "pollingInterval": "500ms", "strategy": "default"}}`)
	pools, err := ReadPools(path)
	require.NoError(t, err)
	dir := filepath.Dir(path)
	require.Equal(t, []Pool{
		{Name: "gpu", Command: []string{"factory"}, TokenFile: "/abs/gpu.token", MaxExecutions: 3,
			MessagesPerExecution: 2, PollingInterval: "500ms", Strategy: "default"},
		{Name: "linux", Command: []string{filepath.Join(dir, "bin/factory"), "--once"}, TokenFile: filepath.Join(dir, "linux.token"),
			Env: map[string]string{"A": "b"}, MaxExecutions: DefaultMaxExecutions, MessagesPerExecution: 1},
	}, pools, "sorted by name; relative paths from the file's directory; a bare program name stays for PATH")

	bad := map[string]string{
		"no command":        `{"a1": {"tokenFile": "t"}}`,
		"no token file":     `{"a1": {"command": ["f"]}}`,
		"bad interval":      `{"a1": {"command": ["f"], "tokenFile": "t", "pollingInterval": "soon"}}`,
		"zero interval":     `{"a1": {"command": ["f"], "tokenFile": "t", "pollingInterval": "0s"}}`,
		"unknown strategy":  `{"a1": {"command": ["f"], "tokenFile": "t", "strategy": "custom"}}`,
		"negative max":      `{"a1": {"command": ["f"], "tokenFile": "t", "maxExecutions": -1}}`,
		"unknown field":     `{"a1": {"command": ["f"], "tokenFile": "t", "parallelism": 2}}`,
		"bad pool name":     `{"a b": {"command": ["f"], "tokenFile": "t"}}`,
		"not a JSON object": `["a1"]`,
	}
	for name, body := range bad {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			_, err := ReadPools(write(t, body))
			require.Error(t, err)
		})
	}
}
