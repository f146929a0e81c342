// Package caps detects what a factory can do: the capability tokens it
// advertises in its heartbeat (os:*, arch:*, engine:*, node:*, has:*) and the
// repos it has checked out under its repo base. The scheduler routes on
// these, so a token is advertised only when it is true of this host.
package caps

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/gigafactory/fleet/infra/factory/internal/engine"
	"github.com/gigafactory/fleet/shared/fleet"
)

// Tools are the programs advertised as has:<name> when found on PATH.
var Tools = []string{"git", "gh", "docker", "make", "go", "python3", "npm"}

// Env is what detection reads of the host; tests replace every part.
type Env struct {
	GOOS, GOARCH string
	// LookPath finds a program on PATH (exec.LookPath).
	LookPath func(file string) (string, error)
	// NodeVersion returns the output of `node --version`.
	NodeVersion func(ctx context.Context) (string, error)
}

// Host is the real host.
func Host() Env {
	return Env{
		GOOS: runtime.GOOS, GOARCH: runtime.GOARCH, LookPath: exec.LookPath,
		NodeVersion: func(ctx context.Context) (string, error) {
			ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			out, err := exec.CommandContext(ctx, "node", "--version").Output()
			return string(out), err
		},
	}
}

// Result is one detection.
type Result struct {
	// Capabilities are the tokens for the heartbeat, without repo:*: the
	// coordinator derives those from Repos.
	Capabilities []string
	// Repos are the repo names under the repo base.
	Repos []string
	// Engines are the configured engines whose program was found.
	Engines []string
	// Missing explains each configured engine that is not advertised.
	Missing []string
}

// All is every token, repo:<name> included, as the scheduler sees them.
func (r Result) All() []string {
	out := slices.Clone(r.Capabilities)
	for _, name := range r.Repos {
		out = append(out, fleet.RepoCapability(name))
	}
	return out
}

// Detect runs detection. engines maps engine names to command templates;
// extra tokens are appended as given. Only an unreadable repo base is an
// error: a host without node simply does not advertise node:*.
func Detect(ctx context.Context, env Env, engines map[string]string, repoBase string, extra []string) (Result, error) {
	var r Result
	add := func(c string) {
		if !slices.Contains(r.Capabilities, c) {
			r.Capabilities = append(r.Capabilities, c)
		}
	}
	if env.GOOS != "" {
		add("os:" + env.GOOS)
	}
	if env.GOARCH != "" {
		add("arch:" + env.GOARCH)
	}
	for _, name := range slices.Sorted(func(yield func(string) bool) {
		for k := range engines {
			if !yield(k) {
				return
			}
		}
	}) {
		prog, err := engine.Program(engines[name])
		if err != nil {
			r.Missing = append(r.Missing, fmt.Sprintf("engine %s: %v", name, err))
			continue
		}
		if _, err := env.LookPath(prog); err != nil {
			r.Missing = append(r.Missing, fmt.Sprintf("engine %s: %s not found on PATH", name, prog))
			continue
		}
		r.Engines = append(r.Engines, name)
		add("engine:" + name)
	}
	if env.NodeVersion != nil {
		if _, err := env.LookPath("node"); err == nil {
			if v, err := env.NodeVersion(ctx); err == nil {
				if major, ok := nodeMajor(v); ok {
					add("node:" + major)
				}
			}
		}
	}
	for _, tool := range Tools {
		if _, err := env.LookPath(tool); err == nil {
			add("has:" + tool)
		}
	}
	for _, c := range extra {
		add(c)
	}
	repos, err := Repos(repoBase)
	if err != nil {
		return r, err
	}
	r.Repos = repos
	return r, nil
}

// nodeMajor reads "v20.11.1" as "20".
func nodeMajor(v string) (string, bool) {
	v = strings.TrimPrefix(strings.TrimSpace(v), "v")
	major, _, _ := strings.Cut(v, ".")
	if major == "" || strings.Trim(major, "0123456789") != "" {
		return "", false
	}
	return major, true
}

// Repos lists the git clones directly under base: directories holding a
// .git (a directory, or a file for a linked worktree) whose name is a valid
// repo name. Hidden entries are skipped. A missing base is no repos, not an error, so a pool can start
// empty and clone on demand.
func Repos(base string) ([]string, error) {
	entries, err := os.ReadDir(base)
	if errors.Is(err, fs.ErrNotExist) {
		return []string{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read repo base %s: %w", base, err)
	}
	repos := []string{}
	for _, e := range entries {
		name := e.Name()
		if strings.HasPrefix(name, ".") || !isDir(filepath.Join(base, name)) {
			continue
		}
		if fleet.ValidateName("repo", name) != nil {
			continue
		}
		if exists(filepath.Join(base, name, ".git")) {
			repos = append(repos, name)
		}
	}
	slices.Sort(repos)
	return repos, nil
}

func isDir(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.IsDir()
}

func exists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}
