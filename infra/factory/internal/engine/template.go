// Package engine runs a coding agent CLI on one job: a command template
// expanded into an argv (never through a shell), in the job's worktree, in
// a process group of its own so that a budget or a fence can kill the engine
// and everything it started.
package engine

import (
	"errors"
	"fmt"
	"strings"
)

// Placeholders a template may use, anywhere inside a word. The longest name
// matches first, so @prompt-file is never read as @prompt followed by
// "-file"; "@@" is a literal '@'; any other @word is left as written (an
// email address in a template stays intact).
const (
	PhPrompt     = "@prompt"      // the job body itself, as one argument
	PhPromptFile = "@prompt-file" // path of the file holding the job body
	PhJobID      = "@job-id"
	PhRepo       = "@repo"
	PhTitle      = "@title"
	PhBranch     = "@branch"
	PhWorktree   = "@worktree"
)

// placeholders, longest first.
var placeholders = []string{PhPromptFile, PhWorktree, PhJobID, PhBranch, PhPrompt, PhTitle, PhRepo}

// MaxPromptArg bounds @prompt: Linux refuses a single argument longer than
// 128 KiB (MAX_ARG_STRLEN) with a cryptic E2BIG, so fail with advice first.
const MaxPromptArg = 100 << 10

// Vars are the values placeholders expand to.
type Vars struct {
	Prompt, PromptFile, JobID, Repo, Title, Branch, Worktree string
}

func (v Vars) value(ph string) string {
	switch ph {
	case PhPrompt:
		return v.Prompt
	case PhPromptFile:
		return v.PromptFile
	case PhJobID:
		return v.JobID
	case PhRepo:
		return v.Repo
	case PhTitle:
		return v.Title
	case PhBranch:
		return v.Branch
	case PhWorktree:
		return v.Worktree
	}
	return ""
}

// Split breaks a template into words the way a POSIX shell would for plain
// words and quotes ('…', "…" with \" \\ \$ \` escapes, and \ outside quotes),
// and nothing more: no variables, globs, pipes or redirections. Anything a
// shell is needed for goes through an explicit `sh -c '…'`.
func Split(tmpl string) ([]string, error) {
	var words []string
	var cur strings.Builder
	inWord := false
	const (
		plain = iota
		single
		double
	)
	state := plain
	for i := 0; i < len(tmpl); i++ {
		c := tmpl[i]
		switch state {
		case plain:
			switch {
			case c == ' ' || c == '\t' || c == '\n' || c == '\r':
				if inWord {
					words = append(words, cur.String())
					cur.Reset()
					inWord = false
				}
			case c == '\'':
				state, inWord = single, true
			case c == '"':
				state, inWord = double, true
			case c == '\\':
				if i+1 >= len(tmpl) {
					return nil, errors.New("template ends with a lone backslash")
				}
				i++
				if tmpl[i] != '\n' {
					cur.WriteByte(tmpl[i])
					inWord = true
				}
			default:
				cur.WriteByte(c)
				inWord = true
			}
		case single:
			if c == '\'' {
				state = plain
			} else {
				cur.WriteByte(c)
			}
		case double:
			switch {
			case c == '"':
				state = plain
			case c == '\\' && i+1 < len(tmpl) && strings.IndexByte("\"\\$`\n", tmpl[i+1]) >= 0:
				i++
				if tmpl[i] != '\n' {
					cur.WriteByte(tmpl[i])
				}
			default:
				cur.WriteByte(c)
			}
		}
	}
	if state != plain {
		return nil, errors.New("template has an unterminated quote")
	}
	if inWord {
		words = append(words, cur.String())
	}
	if len(words) == 0 {
		return nil, errors.New("template is empty")
	}
	return words, nil
}

// Program is the program a template runs: its first word.
func Program(tmpl string) (string, error) {
	words, err := Split(tmpl)
	if err != nil {
		return "", err
	}
	return words[0], nil
}

// Expanded is a template made concrete for one job.
type Expanded struct {
	Argv []string
	// UsesPrompt says the template took the body as @prompt or
	// @prompt-file; otherwise the runner feeds it on stdin.
	UsesPrompt bool
}

// Expand splits tmpl and substitutes v into every word. The program (first
// word) is substituted too, which allows e.g. @worktree/run.sh.
func Expand(tmpl string, v Vars) (Expanded, error) {
	words, err := Split(tmpl)
	if err != nil {
		return Expanded{}, err
	}
	var out Expanded
	for _, w := range words {
		s, used, err := expandWord(w, v)
		if err != nil {
			return Expanded{}, err
		}
		out.UsesPrompt = out.UsesPrompt || used
		out.Argv = append(out.Argv, s)
	}
	return out, nil
}

func expandWord(w string, v Vars) (string, bool, error) {
	if !strings.Contains(w, "@") {
		return w, false, nil
	}
	var b strings.Builder
	usesPrompt := false
	for i := 0; i < len(w); {
		if w[i] != '@' {
			b.WriteByte(w[i])
			i++
			continue
		}
		if strings.HasPrefix(w[i:], "@@") {
			b.WriteByte('@')
			i += 2
			continue
		}
		matched := ""
		for _, ph := range placeholders {
			if strings.HasPrefix(w[i:], ph) && !isNameByte(w, i+len(ph)) {
				matched = ph
				break
			}
		}
		if matched == "" {
			b.WriteByte('@')
			i++
			continue
		}
		val := v.value(matched)
		if matched == PhPrompt && len(val) > MaxPromptArg {
			return "", false, fmt.Errorf("the job body is %d bytes, too long for one argument (@prompt takes at most %d); use @prompt-file or let the engine read stdin", len(val), MaxPromptArg)
		}
		if matched == PhPrompt || matched == PhPromptFile {
			usesPrompt = true
		}
		b.WriteString(val)
		i += len(matched)
	}
	return b.String(), usesPrompt, nil
}

// isNameByte reports whether w[i] continues a placeholder name, which
// would make the match a different, unknown name (@repository).
func isNameByte(w string, i int) bool {
	if i >= len(w) {
		return false
	}
	c := w[i]
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-'
}
