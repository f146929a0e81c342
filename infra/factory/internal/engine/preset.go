package engine

import (
	"github.com/gigafactory/fleet/infra/factory/internal/engine/stream"
)

// Preset is a coding-agent CLI the factory runs in its documented headless
// mode and whose structured output it reads (API.md "Engines the factory
// understands"). Every preset takes its prompt on stdin: no argument
// length limit, and the job's text never shows in ps.
type Preset string

// Presets.
const (
	// PresetClaude is Claude Code:
	//   claude -p --output-format stream-json --verbose
	//          --permission-mode acceptEdits
	//          [--append-system-prompt-file <persona>] [--resume <session>]
	// -p reads the prompt from stdin when no prompt argument is given
	// (code.claude.com/docs/en/cli-reference: `cat file | claude -p`);
	// stream-json with -p needs --verbose (the CLI refuses otherwise);
	// acceptEdits lets it edit unattended and, unlike
	// --dangerously-skip-permissions, is accepted as root (shared/AGENTS.md,
	// checked with CLI 2.1.197).
	PresetClaude Preset = "claude"
	// PresetCodex is the Codex CLI:
	//   codex exec --json --sandbox workspace-write --skip-git-repo-check
	//              -C <worktree> [resume <thread>] -
	// "-" reads the prompt from stdin, for exec and for exec resume
	// (openai/codex codex-rs/exec/src/cli.rs). exec has no
	// --ask-for-approval flag: it always runs with approvals "never"
	// ("Default to never ask for approvals in headless mode",
	// codex-rs/exec/src/lib.rs), which is what API.md asks. The root
	// options (--sandbox, -C) go before the resume subcommand, which
	// inherits them.
	PresetCodex Preset = "codex"
)

// PresetValue is what FLEET_ENGINE_<NAME> holds to select the preset of
// that name instead of a template.
const PresetValue = "preset"

// ParsePreset returns the preset named name.
func ParsePreset(name string) (Preset, bool) {
	switch p := Preset(name); p {
	case PresetClaude, PresetCodex:
		return p, true
	}
	return "", false
}

// Program is the preset's executable, looked up on PATH.
func (p Preset) Program() string { return string(p) }

// VersionArgv is the command that prints the CLI's version.
func (p Preset) VersionArgv() []string { return []string{p.Program(), "--version"} }

// PresetRun is what one run of a preset needs.
type PresetRun struct {
	Worktree string
	// PersonaFile holds the persona's instructions; "" when there are none.
	PersonaFile string
	// Resume is the engine session to resume; "" starts a new one.
	Resume string
}

// Argv is the command line of one run; the prompt goes on stdin.
func (p Preset) Argv(r PresetRun) []string {
	switch p {
	case PresetClaude:
		argv := []string{"claude", "-p", "--output-format", "stream-json", "--verbose", "--permission-mode", "acceptEdits"}
		if r.PersonaFile != "" {
			argv = append(argv, "--append-system-prompt-file", r.PersonaFile)
		}
		if r.Resume != "" {
			argv = append(argv, "--resume", r.Resume)
		}
		return argv
	case PresetCodex:
		argv := []string{"codex", "exec", "--json", "--sandbox", "workspace-write", "--skip-git-repo-check", "-C", r.Worktree}
		if r.Resume != "" {
			argv = append(argv, "resume", r.Resume)
		}
		return append(argv, "-")
	}
	return nil
}

// PersonaInPrompt says the persona goes before the prompt on stdin: codex
// exec has no flag for added instructions.
func (p Preset) PersonaInPrompt() bool { return p == PresetCodex }

// Parser is a parser of the preset's output, pricing tokens by price
// where the CLI reports no cost. before is what a resumed session had used
// before this run, where the CLI counts it again (Codex, stream.Codex.Before;
// a resumed Claude session reports only its own).
func (p Preset) Parser(price stream.Price, before stream.Usage) stream.Parser {
	if p == PresetCodex {
		return &stream.Codex{Price: price, Before: before}
	}
	return &stream.Claude{Price: price}
}

// Transcript renders the preset's output for the run's log.
func (p Preset) Transcript() stream.Renderer {
	if p == PresetCodex {
		return stream.CodexTranscript{}
	}
	return stream.ClaudeTranscript{}
}
