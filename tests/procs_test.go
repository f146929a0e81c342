package tests

import (
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestStackSizesTheHandlersGOMAXPROCS: fleet-local starts the handler with
// half the CPUs (at least one) as its GOMAXPROCS, unless the user set
// GOMAXPROCS in the environment, which the handler then keeps.
func TestStackSizesTheHandlersGOMAXPROCS(t *testing.T) {
	if os.Getenv("GOMAXPROCS") != "" {
		t.Skip("GOMAXPROCS is set for the tests, and the stack keeps it")
	}
	t.Parallel()
	handler, _ := binaries(t)
	for _, tc := range []struct {
		name string
		env  []string
		want string
	}{
		{"half the CPUs", nil, strconv.Itoa(max(1, runtime.GOMAXPROCS(0)/2))},
		{"the user's setting", []string{"GOMAXPROCS=3"}, "3"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := startStack(t, tc.env...)
			env := childEnviron(t, s.cmd.Process.Pid, handler)
			require.Contains(t, env, "GOMAXPROCS="+tc.want)
		})
	}
}

// childEnviron is the environment of the child of ppid running binary.
func childEnviron(t *testing.T, ppid int, binary string) []string {
	t.Helper()
	stats, err := filepath.Glob("/proc/[0-9]*/stat")
	require.NoError(t, err)
	for _, p := range stats {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		s := string(b)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
		if len(f) < 2 || f[1] != strconv.Itoa(ppid) {
			continue
		}
		dir := filepath.Dir(p)
		cmdline, err := os.ReadFile(filepath.Join(dir, "cmdline"))
		if err != nil || !strings.HasPrefix(string(cmdline), binary) {
			continue
		}
		environ, err := os.ReadFile(filepath.Join(dir, "environ"))
		require.NoError(t, err)
		return strings.Split(string(environ), "\x00")
	}
	t.Fatalf("no child of %d runs %s", ppid, binary)
	return nil
}
