package fleet

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"gopkg.in/yaml.v3"
)

// Manifest is a parsed job manifest: YAML front matter plus a Markdown body
// kept verbatim.
type Manifest struct {
	Title          string
	Repo           string
	Capabilities   []string
	Persona        string
	Kind           JobKind
	Priority       Priority
	Budget         Budget
	Deps           []string
	DepsMode       DepsMode
	IdempotencyKey string
	ParentID       string
	Review         *Review
	MaxAttempts    int
	Body           string
}

// DefaultMaxAttempts is how many times a retryable failure is retried before
// the job is dead-lettered, when the manifest does not say.
const DefaultMaxAttempts = 3

const maxMaxAttempts = 20

// ParseManifest parses and validates a manifest. Every error is an *Error
// with Code invalid_argument (or too_large) naming the field at fault.
func ParseManifest(src []byte) (*Manifest, error) {
	if len(src) > MaxManifestBytes {
		return nil, &Error{Code: CodeTooLarge, Field: "manifest", Message: fmt.Sprintf("manifest is %d bytes, at most %d allowed", len(src), MaxManifestBytes)}
	}
	front, body, err := splitFrontMatter(src)
	if err != nil {
		return nil, err
	}
	var doc yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(front))
	if err := dec.Decode(&doc); err != nil && !errors.Is(err, io.EOF) {
		return nil, Invalid("manifest", "front matter is not valid YAML: %v", err)
	}
	// A "..." line ends a YAML document; whatever follows it would otherwise
	// be dropped unread, unknown fields and all.
	var more yaml.Node
	if err := dec.Decode(&more); !errors.Is(err, io.EOF) {
		return nil, Invalid("manifest", "front matter must be a single YAML document")
	}
	m := &Manifest{Body: body, Priority: PriorityNormal, DepsMode: DepsAll, MaxAttempts: DefaultMaxAttempts}
	if len(doc.Content) == 0 {
		return nil, Invalid("repo", "is required")
	}
	root := doc.Content[0]
	if root.Kind != yaml.MappingNode {
		return nil, Invalid("manifest", "front matter must be a mapping of field: value")
	}
	seen := map[string]bool{}
	for i := 0; i+1 < len(root.Content); i += 2 {
		if err := checkKey("manifest", root.Content[i]); err != nil {
			return nil, err
		}
		key, val := root.Content[i].Value, root.Content[i+1]
		if seen[key] {
			return nil, Invalid(key, "appears twice")
		}
		seen[key] = true
		set, ok := manifestFields[key]
		if !ok {
			return nil, Invalid(key, "unknown field (known: title, repo, kind, capabilities, persona, priority, budget, deps, depsMode, idempotencyKey, parentId, review, maxAttempts)")
		}
		if err := set(m, key, val); err != nil {
			return nil, err
		}
	}
	if err := m.validate(); err != nil {
		return nil, err
	}
	return m, nil
}

// splitFrontMatter cuts "---\n<yaml>\n---\n<body>". The body is returned
// byte for byte as written.
func splitFrontMatter(src []byte) ([]byte, string, error) {
	rest, ok := cutLine(src, "---")
	if !ok {
		return nil, "", Invalid("manifest", "must start with a '---' line opening the YAML front matter")
	}
	for off := 0; off <= len(rest); {
		lineEnd := bytes.IndexByte(rest[off:], '\n')
		var line []byte
		next := len(rest) + 1
		if lineEnd < 0 {
			line = rest[off:]
		} else {
			line = rest[off : off+lineEnd]
			next = off + lineEnd + 1
		}
		if string(bytes.TrimRight(line, "\r \t")) == "---" {
			body := ""
			if next <= len(rest) {
				body = string(rest[next:])
			}
			return rest[:off], body, nil
		}
		off = next
	}
	return nil, "", Invalid("manifest", "front matter is not closed by a '---' line")
}

func cutLine(b []byte, want string) ([]byte, bool) {
	i := bytes.IndexByte(b, '\n')
	if i < 0 {
		return nil, false
	}
	if string(bytes.TrimRight(b[:i], "\r \t")) != want {
		return nil, false
	}
	return b[i+1:], true
}

type fieldSetter func(m *Manifest, field string, n *yaml.Node) error

var manifestFields = map[string]fieldSetter{
	"title":          func(m *Manifest, f string, n *yaml.Node) error { return decodeScalar(f, n, &m.Title) },
	"repo":           func(m *Manifest, f string, n *yaml.Node) error { return decodeScalar(f, n, &m.Repo) },
	"persona":        func(m *Manifest, f string, n *yaml.Node) error { return decodeScalar(f, n, &m.Persona) },
	"idempotencyKey": func(m *Manifest, f string, n *yaml.Node) error { return decodeScalar(f, n, &m.IdempotencyKey) },
	"parentId":       func(m *Manifest, f string, n *yaml.Node) error { return decodeScalar(f, n, &m.ParentID) },
	"capabilities":   func(m *Manifest, f string, n *yaml.Node) error { return decodeStrings(f, n, &m.Capabilities) },
	"deps":           func(m *Manifest, f string, n *yaml.Node) error { return decodeStrings(f, n, &m.Deps) },
	"maxAttempts":    func(m *Manifest, f string, n *yaml.Node) error { return decodeScalar(f, n, &m.MaxAttempts) },
	"kind": func(m *Manifest, f string, n *yaml.Node) error {
		var s string
		if err := decodeScalar(f, n, &s); err != nil {
			return err
		}
		switch s {
		case "task":
			m.Kind = KindTask
		case string(KindComposite):
			m.Kind = KindComposite
		default:
			return Invalid(f, "unknown kind %q (want task or composite)", s)
		}
		return nil
	},
	"priority": func(m *Manifest, f string, n *yaml.Node) error {
		var s string
		if err := decodeScalar(f, n, &s); err != nil {
			return err
		}
		p, err := ParsePriority(f, s)
		m.Priority = p
		return err
	},
	"depsMode": func(m *Manifest, f string, n *yaml.Node) error {
		var s string
		if err := decodeScalar(f, n, &s); err != nil {
			return err
		}
		if d := DepsMode(s); slices.Contains(DepsModes(), d) {
			m.DepsMode = d
			return nil
		}
		return Invalid(f, "unknown depsMode %q (want %s)", s, alternatives(DepsModes()))
	},
	"budget": func(m *Manifest, f string, n *yaml.Node) error {
		return decodeMapping(f, n, map[string]func(string, *yaml.Node) error{
			"wall": func(f string, n *yaml.Node) error {
				var s string
				if err := decodeScalar(f, n, &s); err != nil {
					return err
				}
				d, err := time.ParseDuration(s)
				if err != nil || d <= 0 {
					return Invalid(f, "%q is not a positive duration such as 45m or 2h", s)
				}
				m.Budget.Wall = Duration(d)
				return nil
			},
			"usd": func(f string, n *yaml.Node) error {
				if err := decodeScalar(f, n, &m.Budget.USD); err != nil {
					return err
				}
				// NaN and infinities have no JSON form (a job carrying one
				// could never be stored), and budgets sum estimates.
				return ValidateUSD(f, m.Budget.USD)
			},
		})
	},
	"review": func(m *Manifest, f string, n *yaml.Node) error {
		r := &Review{}
		m.Review = r
		return decodeMapping(f, n, map[string]func(string, *yaml.Node) error{
			"reviewers": func(f string, n *yaml.Node) error { return decodeStrings(f, n, &r.Reviewers) },
			"quorum":    func(f string, n *yaml.Node) error { return decodeScalar(f, n, &r.Quorum) },
			"onReject": func(f string, n *yaml.Node) error {
				var s string
				if err := decodeScalar(f, n, &s); err != nil {
					return err
				}
				o, err := ParseOnReject(f, s)
				r.OnReject = o
				return err
			},
		})
	},
}

func decodeScalar[T any](field string, n *yaml.Node, out *T) error {
	if n.Kind != yaml.ScalarNode {
		return Invalid(field, "must be a single value, not %s", kindName(n))
	}
	// YAML would truncate 2.5 into an int 2 without a word.
	if _, isInt := any(out).(*int); isInt && n.ShortTag() != "!!int" && n.ShortTag() != "!!null" {
		return Invalid(field, "%q is not a whole number", n.Value)
	}
	if err := n.Decode(out); err != nil {
		return Invalid(field, "%q is not a valid %T", n.Value, *out)
	}
	return nil
}

func decodeStrings(field string, n *yaml.Node, out *[]string) error {
	if n.Kind != yaml.SequenceNode {
		return Invalid(field, "must be a list such as [a, b], not %s", kindName(n))
	}
	list := make([]string, 0, len(n.Content))
	for i, item := range n.Content {
		var s string
		if err := decodeScalar(fmt.Sprintf("%s[%d]", field, i), item, &s); err != nil {
			return err
		}
		list = append(list, s)
	}
	*out = list
	return nil
}

func decodeMapping(field string, n *yaml.Node, keys map[string]func(string, *yaml.Node) error) error {
	if n.Kind != yaml.MappingNode {
		return Invalid(field, "must be a mapping such as {key: value}, not %s", kindName(n))
	}
	seen := map[string]bool{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if err := checkKey(field, n.Content[i]); err != nil {
			return err
		}
		k := n.Content[i].Value
		if seen[k] {
			return Invalid(field+"."+k, "appears twice")
		}
		seen[k] = true
		set, ok := keys[k]
		if !ok {
			return Invalid(field+"."+k, "unknown field")
		}
		if err := set(field+"."+k, n.Content[i+1]); err != nil {
			return err
		}
	}
	return nil
}

// checkKey rejects mapping keys that cannot name a field: lists, mappings,
// aliases and the empty string. The error names field, the mapping holding
// the key, since the key itself makes no JSON path.
func checkKey(field string, k *yaml.Node) error {
	if k.Kind != yaml.ScalarNode {
		return Invalid(field, "field names must be plain words, not %s", kindName(k))
	}
	if k.Value == "" {
		return Invalid(field, "has an empty field name")
	}
	return nil
}

func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.SequenceNode:
		return "a list"
	case yaml.MappingNode:
		return "a mapping"
	case yaml.AliasNode:
		return "an alias"
	}
	return "a value"
}

func (m *Manifest) validate() error {
	if err := ValidateName("repo", m.Repo); err != nil {
		return err
	}
	// The body first: an empty one is the fault, not the title it would
	// have supplied.
	if strings.TrimSpace(m.Body) == "" {
		return Invalid("body", "the task body after the front matter is empty")
	}
	// JSON carries only UTF-8: anything else would be rewritten on the way
	// to the store, and the body is kept verbatim.
	if !utf8.ValidString(m.Body) {
		return Invalid("body", "is not valid UTF-8")
	}
	if m.Title == "" {
		m.Title = titleFromBody(m.Body)
	}
	if m.Title == "" {
		return Invalid("title", "is required (or start the body with a heading)")
	}
	if err := ValidateText("title", m.Title, MaxTitleLen); err != nil {
		return err
	}
	caps, err := ValidateCapabilities("capabilities", m.Capabilities)
	if err != nil {
		return err
	}
	m.Capabilities = caps
	if m.Persona != "" {
		if err := ValidateName("persona", m.Persona); err != nil {
			return err
		}
	}
	if m.IdempotencyKey != "" {
		if err := ValidateText("idempotencyKey", m.IdempotencyKey, 200); err != nil {
			return err
		}
	}
	if m.ParentID != "" {
		if err := ValidateName("parentId", m.ParentID); err != nil {
			return err
		}
	}
	if m.Deps == nil {
		m.Deps = []string{} // a job's deps serialise as [], never null
	}
	deps, err := ValidateNames("deps", m.Deps, MaxDeps)
	if err != nil {
		return err
	}
	m.Deps = deps
	if m.MaxAttempts < 1 || m.MaxAttempts > maxMaxAttempts {
		return Invalid("maxAttempts", "must be between 1 and %d", maxMaxAttempts)
	}
	if r := m.Review; r != nil {
		if err := r.ValidateGate("review"); err != nil {
			return err
		}
		if m.Kind == KindComposite {
			// A composite job has no step of its own to review: it ships
			// when its children do.
			return Invalid("review", "a composite job ships when its children have; put the review gate on the children")
		}
	}
	return nil
}

// titleFromBody takes the first non-empty line of the body, without heading
// marks, as a default title: at most 120 characters and MaxTitleLen bytes, cut
// at a character boundary.
func titleFromBody(body string) string {
	for line := range strings.Lines(body) {
		t := strings.TrimSpace(strings.TrimLeft(strings.TrimSpace(line), "#"))
		if t == "" {
			continue
		}
		if r := []rune(t); len(r) > 120 {
			t = string(r[:120])
		}
		for len(t) > MaxTitleLen {
			_, size := utf8.DecodeLastRuneInString(t)
			t = t[:len(t)-size]
		}
		return strings.TrimSpace(t)
	}
	return ""
}
