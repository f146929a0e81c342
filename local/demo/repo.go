package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// seedRepo creates the demo origin (a bare repo with one commit on main)
// and the repo base the factories read it from (one clone per repo, with
// its origin), as a developer's machine would have them.
func seedRepo(ctx context.Context, dir string) (origin, base string, err error) {
	origin = originPath(dir)
	base = filepath.Join(dir, "repos")
	seed := filepath.Join(dir, "origin", "seed")
	steps := []struct {
		dir  string
		args []string
	}{
		{dir, []string{"init", "--quiet", "--bare", "--initial-branch=main", origin}},
		{dir, []string{"clone", "--quiet", origin, seed}},
		{seed, []string{"checkout", "--quiet", "-B", "main"}},
	}
	for _, s := range steps {
		if err := git(ctx, s.dir, s.args...); err != nil {
			return "", "", err
		}
	}
	files := map[string]string{
		"README.md":    "# demo\n\nThe repository `make demo`'s factories work on. Each job appends a line to CHANGELOG.md on its own branch, aq/job/<id>.\n",
		"CHANGELOG.md": "# Changelog\n\n",
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(seed, name), []byte(body), 0o644); err != nil {
			return "", "", err
		}
	}
	for _, args := range [][]string{{"add", "."}, {"commit", "--quiet", "-m", "initial"}, {"push", "--quiet", "origin", "main"}} {
		if err := git(ctx, seed, args...); err != nil {
			return "", "", err
		}
	}
	if err := os.RemoveAll(seed); err != nil {
		return "", "", err
	}
	if err := os.MkdirAll(base, 0o755); err != nil {
		return "", "", err
	}
	if err := git(ctx, base, "clone", "--quiet", origin, demoRepo); err != nil {
		return "", "", err
	}
	return origin, base, nil
}

func git(ctx context.Context, dir string, args ...string) error {
	cmd := exec.CommandContext(ctx, "git", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=fleet demo", "GIT_AUTHOR_EMAIL=demo@fleet.invalid",
		"GIT_COMMITTER_NAME=fleet demo", "GIT_COMMITTER_EMAIL=demo@fleet.invalid", "GIT_TERMINAL_PROMPT=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("git %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// originPath is the demo origin, a bare repository under dir.
func originPath(dir string) string { return filepath.Join(dir, "origin", demoRepo+".git") }
