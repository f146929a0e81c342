package main

import (
	"context"
	"fmt"
	"io"
	"maps"
	"os/exec"
	"slices"
	"strings"
	"time"

	"github.com/gigafactory/fleet/infra/factory/internal/config"
	"github.com/gigafactory/fleet/infra/factory/internal/engine"
)

// versionTimeout bounds one engine's version command.
const versionTimeout = 15 * time.Second

// checkEngines runs each configured engine's version command (a preset's
// `claude --version` / `codex --version`, a template's program with
// --version) and prints what it found, one line per engine, without
// running a job. It reports whether every engine answered.
func checkEngines(ctx context.Context, cfg config.Config, out io.Writer) bool {
	ok := true
	for _, name := range slices.Sorted(maps.Keys(cfg.Engines)) {
		kind, argv := "template", []string(nil)
		if p, isPreset := cfg.Presets[name]; isPreset {
			kind, argv = "preset "+string(p), p.VersionArgv()
		} else if prog, err := engine.Program(cfg.Engines[name]); err != nil {
			fmt.Fprintf(out, "engine %s (%s): MISSING: %v\n", name, kind, err)
			ok = false
			continue
		} else {
			argv = []string{prog, "--version"}
		}
		path, err := exec.LookPath(argv[0])
		if err != nil {
			fmt.Fprintf(out, "engine %s (%s): MISSING: %s is not on PATH\n", name, kind, argv[0])
			ok = false
			continue
		}
		vctx, cancel := context.WithTimeout(ctx, versionTimeout)
		b, err := exec.CommandContext(vctx, path, argv[1:]...).CombinedOutput()
		cancel()
		version, _, _ := strings.Cut(strings.TrimSpace(string(b)), "\n")
		if err != nil {
			fmt.Fprintf(out, "engine %s (%s): FAILED: %s %s: %v %s\n", name, kind, path, strings.Join(argv[1:], " "), err, version)
			ok = false
			continue
		}
		fmt.Fprintf(out, "engine %s (%s): %s: %s\n", name, kind, path, version)
	}
	return ok
}
