package caps

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// fakeEnv finds exactly the programs in path.
func fakeEnv(node string, path ...string) Env {
	return Env{
		GOOS: "linux", GOARCH: "arm64",
		LookPath: func(file string) (string, error) {
			for _, p := range path {
				if p == file {
					return "/usr/bin/" + file, nil
				}
			}
			return "", errors.New("not found")
		},
		NodeVersion: func(context.Context) (string, error) {
			if node == "" {
				return "", errors.New("no node")
			}
			return node, nil
		},
	}
}

func TestDetect(t *testing.T) {
	t.Parallel()
	repoBase := t.TempDir()
	for _, d := range []string{"alpha/.git", "beta/.git", ".hidden/.git", "notrepo", "bad name/.git"} {
		require.NoError(t, os.MkdirAll(filepath.Join(repoBase, d), 0o755))
	}
	// A linked worktree or submodule has a .git file.
	require.NoError(t, os.MkdirAll(filepath.Join(repoBase, "gamma"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(repoBase, "gamma", ".git"), []byte("gitdir: x"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(repoBase, "file"), nil, 0o644))

	engines := map[string]string{
		"claude": "claude -p @prompt",
		"codex":  "codex exec @prompt",
		"broken": "'unterminated",
	}
	tests := []struct {
		name    string
		env     Env
		extra   []string
		want    []string
		engines []string
		missing int
	}{
		{name: "everything", env: fakeEnv("v20.11.1\n", "claude", "codex", "git", "node", "gh"), extra: []string{"gpu:a100"},
			want:    []string{"os:linux", "arch:arm64", "engine:claude", "engine:codex", "node:20", "has:git", "has:gh", "gpu:a100"},
			engines: []string{"claude", "codex"}, missing: 1},
		{name: "engine not on PATH is not advertised", env: fakeEnv("", "claude", "git"),
			want: []string{"os:linux", "arch:arm64", "engine:claude", "has:git"}, engines: []string{"claude"}, missing: 2},
		{name: "odd node version is skipped", env: fakeEnv("weird", "node"),
			want: []string{"os:linux", "arch:arm64"}, missing: 3},
		{name: "extra duplicates dropped", env: fakeEnv("", "git"), extra: []string{"has:git", "os:linux"},
			want: []string{"os:linux", "arch:arm64", "has:git"}, missing: 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r, err := Detect(context.Background(), tt.env, engines, repoBase, tt.extra)
			require.NoError(t, err)
			require.Equal(t, tt.want, r.Capabilities)
			require.Equal(t, tt.engines, r.Engines)
			require.Len(t, r.Missing, tt.missing)
			require.Equal(t, []string{"alpha", "beta", "gamma"}, r.Repos)
			require.Subset(t, r.All(), []string{"repo:alpha", "repo:beta", "repo:gamma"})
		})
	}
}

func TestRepos(t *testing.T) {
	t.Parallel()
	repos, err := Repos(filepath.Join(t.TempDir(), "missing"))
	require.NoError(t, err, "a pool may start with no repo base yet")
	require.Empty(t, repos)
	require.NotNil(t, repos, "heartbeats need [] rather than null")

	f := filepath.Join(t.TempDir(), "file")
	require.NoError(t, os.WriteFile(f, nil, 0o644))
	_, err = Repos(f)
	require.Error(t, err)
}

func TestNodeMajor(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{"v20.11.1\n": "20", "v8.0.0": "8", "22": "22", "": "", "vX.1": "", "v.1": ""} {
		got, ok := nodeMajor(in)
		require.Equal(t, want, got, in)
		require.Equal(t, want != "", ok, in)
	}
}
