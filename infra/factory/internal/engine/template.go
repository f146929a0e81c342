// Package engine runs a coding agent CLI on one job: a command template
// expanded into an argv (never through a shell), in the job's worktree, in
// a process group of its own so that a budget or a fence can kill the engine
// and everything it started.
package engine

import (
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
)

// Placeholders a template may use, anywhere inside a word. The longest name
// matches first, so @prompt-file is never read as @prompt followed by
// "-file"; "@@" is a literal '@'; any other @word is left as written (an
// email address in a template stays intact).
const (
	PhPrompt     = "@prompt"      // the job body itself, as one argument
	PhPromptFile = "@prompt-file" // path of the file holding the job body
	// PhPersonaFile is the path of the file holding the instructions of
	// the job's persona profile (empty when the job names none).
	PhPersonaFile = "@persona-file"
	// PhFeedbackFile is the path of the file holding the forge's feedback
	// that asked for this iteration (empty on the first).
	PhFeedbackFile = "@feedback-file"
	PhJobID        = "@job-id"
	PhRepo         = "@repo"
	PhTitle        = "@title"
	PhBranch       = "@branch"
	PhWorktree     = "@worktree"
)

// placeholders, longest first.
var placeholders = []string{PhFeedbackFile, PhPersonaFile, PhPromptFile, PhWorktree, PhJobID, PhBranch, PhPrompt, PhTitle, PhRepo}

// MaxPromptArg bounds @prompt: Linux refuses a single argument longer than
// 128 KiB (MAX_ARG_STRLEN) with a cryptic E2BIG, so fail with advice first.
const MaxPromptArg = 100 << 10

// Vars are the values placeholders expand to.
type Vars struct {
	Prompt, PromptFile, PersonaFile, FeedbackFile, JobID, Repo, Title, Branch, Worktree string
}

// envName is the variable a placeholder inside a shell script refers to.
func envName(ph string) string {
	return "FLEET_TEMPLATE_" + strings.ToUpper(strings.ReplaceAll(strings.TrimPrefix(ph, "@"), "-", "_"))
}

func (v Vars) value(ph string) string {
	switch ph {
	case PhPrompt:
		return v.Prompt
	case PhPromptFile:
		return v.PromptFile
	case PhPersonaFile:
		return v.PersonaFile
	case PhFeedbackFile:
		return v.FeedbackFile
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
	// Env holds the variables (FLEET_TEMPLATE_<NAME>=value) that
	// placeholders inside a shell script refer to; the runner adds them to
	// the command's environment.
	Env []string
	// UsesPrompt says the template took the body as @prompt or
	// @prompt-file; otherwise the runner feeds it on stdin.
	UsesPrompt bool
}

// Expand splits tmpl and substitutes v into every word. The program (first
// word) is substituted too, which allows e.g. @worktree/run.sh.
//
// The script of a shell's -c (sh, bash, dash, zsh, ksh…, anywhere in the
// command: `env X=1 bash -ec '…'` too) is code, so a value is never
// spliced into it: a placeholder there becomes a reference to an
// environment variable holding the value, quoted for where it stands in
// the script ("${V}" outside quotes, ${V} inside double quotes, '"${V}"'
// inside single quotes), so it expands to exactly the value, as one word,
// and is never parsed as shell code.
func Expand(tmpl string, v Vars) (Expanded, error) {
	words, err := Split(tmpl)
	if err != nil {
		return Expanded{}, err
	}
	script := scriptIndex(words)
	var out Expanded
	env := map[string]bool{}
	options := true // until a word "--": after it, words are not options
	for i, w := range words {
		x := expander{v: v, script: i == script}
		s, err := x.word(w)
		if err != nil {
			return Expanded{}, err
		}
		if options && !x.script && x.leadingPrompt && strings.HasPrefix(s, "-") {
			// The submitter's body ("--dangerously-…") would be read by
			// the engine as an option where the template put the prompt.
			return Expanded{}, fmt.Errorf("the job body begins with '-' and %q puts it where the engine reads options: put \"--\" before it, or use @prompt-file or stdin", w)
		}
		options = options && w != "--"
		out.UsesPrompt = out.UsesPrompt || x.usesPrompt
		out.Argv = append(out.Argv, s)
		for _, ph := range x.refs {
			if !env[ph] {
				env[ph] = true
				out.Env = append(out.Env, envName(ph)+"="+v.value(ph))
			}
		}
	}
	return out, nil
}

// shells are the programs whose -c argument is a script.
var shells = []string{"sh", "bash", "dash", "zsh", "ksh", "mksh", "ash", "yash", "posh"}

// scriptIndex is the index of the word that is a shell's -c script, -1
// when there is none: the first operand after a shell's option cluster
// holding 'c' (-c, -ec, -lc …), skipping the argument of -o/+o/-O/+O.
func scriptIndex(words []string) int {
	for s, w := range words {
		if !slices.Contains(shells, filepath.Base(w)) {
			continue
		}
		hasC := false
		for i := s + 1; i < len(words); i++ {
			a := words[i]
			switch {
			case a == "--":
				if hasC && i+1 < len(words) {
					return i + 1
				}
				return -1
			case a == "-o" || a == "+o" || a == "-O" || a == "+O":
				i++
			case len(a) > 1 && (a[0] == '-' || a[0] == '+') && a[1] != '-':
				hasC = hasC || strings.ContainsRune(a[1:], 'c')
			case strings.HasPrefix(a, "--"):
				// A long option (--login, --norc …).
			default:
				if hasC {
					return i
				}
				return -1
			}
		}
		return -1
	}
	return -1
}

// expander substitutes placeholders in one word.
type expander struct {
	v          Vars
	script     bool     // the word is a shell script
	usesPrompt bool     // @prompt or @prompt-file seen
	refs       []string // placeholders referenced as variables (script)
	// leadingPrompt: the word begins with @prompt, the body.
	leadingPrompt bool
}

// Shell quoting states of a script, as far as placeholders care.
const (
	qPlain  = iota
	qSingle // '…'
	qDouble // "…"
	qANSI   // $'…'
)

func (x *expander) word(w string) (string, error) {
	if !strings.Contains(w, "@") {
		return w, nil
	}
	var b strings.Builder
	state := qPlain
	for i := 0; i < len(w); {
		c := w[i]
		if c != '@' {
			b.WriteByte(c)
			i++
			if !x.script {
				continue
			}
			// Track the script's quoting to quote references right.
			switch {
			case c == '\\' && state != qSingle && i < len(w):
				b.WriteByte(w[i])
				i++
			case c == '\'' && state == qPlain:
				state = qSingle
				if b.Len() >= 2 && strings.HasSuffix(b.String(), "$'") {
					state = qANSI
				}
			case c == '\'' && (state == qSingle || state == qANSI):
				state = qPlain
			case c == '"' && state == qPlain:
				state = qDouble
			case c == '"' && state == qDouble:
				state = qPlain
			}
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
		val := x.v.value(matched)
		if matched == PhPrompt && len(val) > MaxPromptArg {
			return "", fmt.Errorf("the job body is %d bytes, too long for one argument (@prompt takes at most %d); use @prompt-file or let the engine read stdin", len(val), MaxPromptArg)
		}
		if matched == PhPrompt || matched == PhPromptFile {
			x.usesPrompt = true
		}
		x.leadingPrompt = x.leadingPrompt || (matched == PhPrompt && i == 0)
		i += len(matched)
		if !x.script {
			b.WriteString(val)
			continue
		}
		if !slices.Contains(x.refs, matched) {
			x.refs = append(x.refs, matched)
		}
		ref := "${" + envName(matched) + "}"
		switch state {
		case qPlain:
			b.WriteString(`"` + ref + `"`)
		case qDouble:
			b.WriteString(ref)
		case qSingle:
			b.WriteString(`'"` + ref + `"'`)
		case qANSI:
			b.WriteString(`'"` + ref + `"$'`)
		}
	}
	return b.String(), nil
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
