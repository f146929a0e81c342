package stream

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"sync"
)

// A structured engine's run log is a transcript a person reads (API.md
// "Live output"): its text, each tool call with its command or file, the
// first lines of each result, and how the turn ended, rather than the raw
// JSON (which the run keeps as engine-events.jsonl). The shapes are those
// the parsers read (claude.go, codex.go, with their sources), plus the
// content blocks of Claude's assistant and user messages (text, tool_use
// {name, input}, tool_result {content}) and Codex's items (agent_message,
// reasoning, command_execution, file_change, error), as exec_events.rs
// defines them.

// Renderer turns one event line into transcript text ("" for none).
type Renderer interface {
	Render(line []byte) string
}

// resultLines bounds how much of a tool's result the transcript shows.
const resultLines = 3

// Transcript is an io.Writer fed with the engine's stdout: it splits it
// into lines (bounded as the Reader does) and writes each line's rendering
// to w. A line that is not an event (not a JSON object) is written as it
// came: it is something the engine printed for people.
type Transcript struct {
	r     Renderer
	w     io.Writer
	mu    sync.Mutex
	lines lines
}

// NewTranscript writes r's rendering of each line to w.
func NewTranscript(r Renderer, w io.Writer) *Transcript { return &Transcript{r: r, w: w} }

// Write consumes b. It never fails: the transcript must not stop the
// engine's output from reaching the parser and the events file.
func (t *Transcript) Write(b []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.lines.feed(b, t.line)
	return len(b), nil
}

// Close renders a last line the engine did not end with a newline.
func (t *Transcript) Close() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.lines.end(t.line)
	return nil
}

func (t *Transcript) line(line []byte, overlong bool) {
	var out string
	switch {
	case overlong:
		out = "[an event longer than 1 MiB was left out]"
	case line[0] != '{':
		out = string(line)
	default:
		out = t.r.Render(line)
	}
	if out != "" {
		_, _ = io.WriteString(t.w, strings.TrimRight(out, "\n")+"\n")
	}
}

// firstLines is s's first n lines, "…" marking more.
func firstLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = append(lines[:n], "…")
	}
	return strings.Join(lines, "\n")
}

// indent prefixes every line of s.
func indent(s, prefix string) string {
	return prefix + strings.ReplaceAll(s, "\n", "\n"+prefix)
}

// ClaudeTranscript renders Claude Code's stream-json.
type ClaudeTranscript struct{}

type claudeBlock struct {
	Type    string          `json:"type"`
	Text    string          `json:"text"`
	Name    string          `json:"name"`
	Input   json.RawMessage `json:"input"`
	Content json.RawMessage `json:"content"`
	IsError bool            `json:"is_error"`
}

type claudeEvent struct {
	claudeLine
	Message *struct {
		Model   string          `json:"model"`
		Content json.RawMessage `json:"content"`
	} `json:"message"`
	Attempt      int     `json:"attempt"`
	MaxRetries   int     `json:"max_retries"`
	RetryDelayMs float64 `json:"retry_delay_ms"`
}

// Render implements Renderer.
func (ClaudeTranscript) Render(line []byte) string {
	var e claudeEvent
	if json.Unmarshal(line, &e) != nil {
		return ""
	}
	switch e.Type {
	case "system":
		switch e.Subtype {
		case "init":
			return fmt.Sprintf("● claude session %s, model %s", e.SessionID, e.Model)
		case "api_retry":
			return fmt.Sprintf("… the API answered %d: retry %d of %d in %.0f ms", e.ErrorStatus, e.Attempt, e.MaxRetries, e.RetryDelayMs)
		}
	case "assistant", "user":
		if e.Message == nil {
			return ""
		}
		return renderBlocks(e.Message.Content)
	case "rate_limit_event":
		if e.RateLimitInfo != nil {
			return "! rate limit: " + e.RateLimitInfo.Status
		}
	case "result":
		mark := "✓"
		if e.IsError {
			mark = "✗"
		}
		s := fmt.Sprintf("%s %s after %d turns", mark, e.Subtype, e.NumTurns)
		if e.TotalCostUSD != nil {
			s += fmt.Sprintf(", $%.4f", *e.TotalCostUSD)
		}
		if e.APIErrorStatus != 0 {
			s += fmt.Sprintf(", API status %d", e.APIErrorStatus)
		}
		if strings.TrimSpace(e.Result) != "" {
			s += "\n" + indent(firstLines(e.Result, resultLines), "  ")
		}
		return s
	}
	return ""
}

// renderBlocks renders a message's content: a string, or blocks.
func renderBlocks(raw json.RawMessage) string {
	var text string
	if json.Unmarshal(raw, &text) == nil {
		return text
	}
	var blocks []claudeBlock
	if json.Unmarshal(raw, &blocks) != nil {
		return ""
	}
	var out []string
	for _, b := range blocks {
		switch b.Type {
		case "text":
			if strings.TrimSpace(b.Text) != "" {
				out = append(out, strings.TrimSpace(b.Text))
			}
		case "tool_use":
			out = append(out, "→ "+b.Name+toolTarget(b.Input))
		case "tool_result":
			mark := "←"
			if b.IsError {
				mark = "← error:"
			}
			if r := firstLines(renderBlocks(b.Content), resultLines); r != "" {
				out = append(out, indent(mark+" "+r, "  "))
			}
		}
	}
	return strings.Join(out, "\n")
}

// toolTarget is what a tool call acts on: its command, file, pattern or
// URL, when its input names one.
func toolTarget(input json.RawMessage) string {
	var in map[string]any
	if json.Unmarshal(input, &in) != nil {
		return ""
	}
	for _, k := range []string{"command", "file_path", "path", "pattern", "url", "description"} {
		if v, ok := in[k].(string); ok && v != "" {
			return " " + firstLines(v, 1)
		}
	}
	return ""
}

// CodexTranscript renders Codex's exec --json.
type CodexTranscript struct{}

type codexEvent struct {
	codexLine
	Item *struct {
		Type             string `json:"type"`
		Text             string `json:"text"`
		Command          string `json:"command"`
		AggregatedOutput string `json:"aggregated_output"`
		ExitCode         *int   `json:"exit_code"`
		Message          string `json:"message"`
		Changes          []struct {
			Path string `json:"path"`
			Kind string `json:"kind"`
		} `json:"changes"`
	} `json:"item"`
}

// Render implements Renderer.
func (CodexTranscript) Render(line []byte) string {
	var e codexEvent
	if json.Unmarshal(line, &e) != nil {
		return ""
	}
	switch e.Type {
	case "thread.started":
		return "● codex thread " + e.ThreadID
	case "item.completed":
		it := e.Item
		if it == nil {
			return ""
		}
		switch it.Type {
		case "agent_message":
			return strings.TrimSpace(it.Text)
		case "reasoning":
			return indent(firstLines(it.Text, 1), "(thinking) ")
		case "command_execution":
			s := "$ " + it.Command
			if out := firstLines(it.AggregatedOutput, resultLines); out != "" {
				s += "\n" + indent(out, "  ")
			}
			if it.ExitCode != nil && *it.ExitCode != 0 {
				s += fmt.Sprintf("\n  (exit %d)", *it.ExitCode)
			}
			return s
		case "file_change":
			var out []string
			for _, c := range it.Changes {
				out = append(out, "✎ "+c.Kind+" "+c.Path)
			}
			return strings.Join(out, "\n")
		case "error":
			return "! " + it.Message
		}
	case "turn.completed":
		if u := e.Usage; u != nil {
			return fmt.Sprintf("✓ turn done: %d input (%d cached), %d output tokens", u.InputTokens, u.CachedInputTokens, u.OutputTokens)
		}
		return "✓ turn done"
	case "turn.failed":
		if e.Error != nil {
			return "✗ turn failed: " + e.Error.Message
		}
		return "✗ turn failed"
	case "error":
		return "! " + e.Message
	}
	return ""
}
