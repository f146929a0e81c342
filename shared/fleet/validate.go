package fleet

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Limits on client input. Every list a client sends has its bound here;
// the OpenAPI document publishes them as maxItems.
const (
	MaxManifestBytes = 1 << 20
	MaxNameLen       = 100
	MaxCapabilityLen = 128
	// MaxCapabilities bounds a job's, a factory's or a token's capabilities.
	MaxCapabilities = 64
	// MaxDeps bounds a job's dependencies.
	MaxDeps = 100
	// MaxRepos bounds the repos a product owns and a factory reports.
	MaxRepos = 1000
	// MaxProducts bounds the products a factory serves.
	MaxProducts = 100
	// MaxChildrenPerRequest bounds the children one POST .../children
	// carries.
	MaxChildrenPerRequest = 50
	// MaxTreeDepth bounds how deep a tree of children goes: a root is at
	// depth 0, its children at 1.
	MaxTreeDepth = 5
	// MaxTreeJobs bounds the jobs of one tree, its root included.
	MaxTreeJobs = 500
	// MaxReviewers bounds a review gate's reviewers.
	MaxReviewers = 50
	MaxTitleLen  = 300
	// MaxReasonLen bounds a stored failure reason, in bytes.
	MaxReasonLen = 4000
)

// MaxDocumentBytes is the largest document a store takes (Cosmos DB's
// limit, which the SQLite store applies too). A write over it fails with
// the store's too-large error.
const MaxDocumentBytes = 2 << 20

// MaxSubmittedJobBytes bounds a job document as submitted, encoded as the
// store writes it: the rest of MaxDocumentBytes is MaxGrowthBytes, room for
// the worst case of what the job gathers later (feedback, runs, votes,
// events; see growth.go), so no later write of the job can fail for its
// size.
const MaxSubmittedJobBytes = MaxDocumentBytes - MaxGrowthBytes

// TruncatedMark ends free text that SanitizeText cut short.
const TruncatedMark = "… [truncated]"

// ValidateName checks a plain name: a repo, product or factory id. Plain means
// letters, digits, '.', '_' and '-', not starting with '-' or '.', so it can
// never be read as a path, a flag or a ref outside its place.
func ValidateName(field, s string) error {
	switch {
	case s == "":
		return Invalid(field, "is required")
	case len(s) > MaxNameLen:
		return Invalid(field, "is longer than %d characters", MaxNameLen)
	case s[0] == '-':
		return Invalid(field, "%q must not start with '-'", s)
	case s[0] == '.':
		return Invalid(field, "%q must not start with '.'", s)
	}
	for _, r := range s {
		if !(r < utf8.RuneSelf && (isAlnum(byte(r)) || r == '.' || r == '_' || r == '-')) {
			return Invalid(field, "%q may hold only letters, digits, '.', '_' and '-' (found %q)", s, r)
		}
	}
	return nil
}

func isAlnum(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

// ValidateNames checks a list of at most max plain names and returns it in
// the order given with duplicates dropped. The bound is checked before any
// entry, and duplicates are found with a set: a list costs time linear in
// its length, whatever the client sent.
func ValidateNames(field string, names []string, max int) ([]string, error) {
	if len(names) > max {
		return nil, Invalid(field, "has %d entries, at most %d allowed", len(names), max)
	}
	out := make([]string, 0, len(names))
	seen := make(map[string]struct{}, len(names))
	for i, n := range names {
		if err := ValidateName(fmt.Sprintf("%s[%d]", field, i), n); err != nil {
			return nil, err
		}
		if _, dup := seen[n]; !dup {
			seen[n] = struct{}{}
			out = append(out, n)
		}
	}
	return out, nil
}

// ValidateCapability checks a kind:value capability token.
func ValidateCapability(field, c string) error {
	kind, value, ok := strings.Cut(c, ":")
	switch {
	case len(c) > MaxCapabilityLen:
		return Invalid(field, "capability is longer than %d characters", MaxCapabilityLen)
	case !ok:
		return Invalid(field, "capability %q must be kind:value, such as os:linux, engine:claude or repo:<name>", c)
	case kind == "":
		return Invalid(field, "capability %q has an empty kind", c)
	case value == "":
		return Invalid(field, "capability %q has an empty value", c)
	}
	for i := 0; i < len(kind); i++ {
		if !(kind[i] >= 'a' && kind[i] <= 'z' || kind[i] >= '0' && kind[i] <= '9' || kind[i] == '_' || kind[i] == '-') {
			return Invalid(field, "capability kind %q may hold only lower-case letters, digits, '_' and '-'", kind)
		}
	}
	for _, r := range value {
		// Not graphic: control, format (zero-width, bidi), private-use,
		// unassigned; any of them would make a token that looks like another
		// and never matches it.
		if unicode.IsSpace(r) || !unicode.IsGraphic(r) || r == utf8.RuneError {
			return Invalid(field, "capability %q must not contain spaces, control or invisible characters", c)
		}
	}
	if kind == "repo" {
		if err := ValidateName(field, value); err != nil {
			return err
		}
	}
	return nil
}

// ValidateCapabilities checks a list and returns it in the order given with
// duplicates dropped.
func ValidateCapabilities(field string, caps []string) ([]string, error) {
	if len(caps) > MaxCapabilities {
		return nil, Invalid(field, "has %d entries, at most %d allowed", len(caps), MaxCapabilities)
	}
	out := make([]string, 0, len(caps))
	seen := make(map[string]struct{}, len(caps))
	for i, c := range caps {
		if err := ValidateCapability(fmt.Sprintf("%s[%d]", field, i), c); err != nil {
			return nil, err
		}
		if _, dup := seen[c]; !dup {
			seen[c] = struct{}{}
			out = append(out, c)
		}
	}
	return out, nil
}

// ValidateText checks free text: at most maxLen bytes of valid UTF-8 with no
// control characters other than tab, newline and a carriage return ending a
// line (CRLF), and no bidirectional embeddings, overrides or isolates. A
// lone carriage return writes what follows over what a terminal showed
// before it, and those controls make text display as something else
// (SanitizeText escapes both).
func ValidateText(field, s string, maxLen int) error {
	if len(s) > maxLen {
		return Invalid(field, "is longer than %d characters", maxLen)
	}
	if !utf8.ValidString(s) {
		return Invalid(field, "is not valid UTF-8")
	}
	for i, r := range s {
		switch {
		case r == '\r':
			if !strings.HasPrefix(s[i+1:], "\n") {
				return Invalid(field, "must not contain a carriage return but before a newline")
			}
		case isBidiReorder(r):
			return Invalid(field, "must not contain bidirectional embeddings, overrides or isolates (found %U)", r)
		case unicode.IsControl(r) && r != '\t' && r != '\n':
			return Invalid(field, "must not contain control characters (found %U)", r)
		}
	}
	return nil
}

// SanitizeText makes free text a client reports (an engine's failure output)
// safe to store and to show, without ever refusing it: bytes that are not
// UTF-8 become U+FFFD; control characters other than tab and newline, and
// the bidirectional controls that can make text display as something else,
// are written as escapes (\x1b, \u202e); and the result is cut at a
// character boundary to at most maxLen bytes, ending in TruncatedMark.
func SanitizeText(s string, maxLen int) string {
	var b strings.Builder
	// Escaping at most multiplies by six; stop once past the bound.
	limit := maxLen + 1
	for _, r := range strings.ToValidUTF8(s, "\uFFFD") {
		if b.Len() >= limit {
			break
		}
		WriteShown(&b, r, true)
	}
	out := b.String()
	if len(out) <= maxLen {
		return out
	}
	cut := max(maxLen-len(TruncatedMark), 0)
	for cut > 0 && !utf8.RuneStart(out[cut]) {
		cut--
	}
	return out[:cut] + TruncatedMark
}

// WriteShown writes r to b as text is shown safely: a control character as
// an escape (\x1b, \u0085), tab and newline kept when keepLayout is set
// (else \t, \n: a one-line cell), a bidirectional control as \u202e, the
// rest as it is. The one rule for stored text (SanitizeText) and for what a
// client prints (fleetctl).
func WriteShown(b *strings.Builder, r rune, keepLayout bool) {
	switch {
	case (r == '\t' || r == '\n') && keepLayout:
		b.WriteRune(r)
	case r == '\t':
		b.WriteString(`\t`)
	case r == '\n':
		b.WriteString(`\n`)
	case r < utf8.RuneSelf && unicode.IsControl(r):
		fmt.Fprintf(b, `\x%02x`, r)
	case unicode.IsControl(r) || IsBidiControl(r):
		fmt.Fprintf(b, `\u%04x`, r)
	default:
		b.WriteRune(r)
	}
}

// IsBidiControl reports the explicit bidirectional formatting characters
// (embeddings, overrides, isolates, marks), which reorder how the text
// around them is displayed. Clients escape them where they show text.
func IsBidiControl(r rune) bool {
	return isBidiReorder(r) || r == 0x200E || r == 0x200F || r == 0x061C
}

// isBidiReorder reports the embeddings, overrides and isolates: each
// reorders all the text after it until it is closed, so that a reader sees
// other text than is there (Trojan Source, CVE-2021-42574). The marks
// (LRM, RLM, ALM) only settle a neutral character's direction, and
// right-to-left writing uses them: stored text may hold them.
func isBidiReorder(r rune) bool {
	return r >= 0x202A && r <= 0x202E || r >= 0x2066 && r <= 0x2069
}

// alternatives names values as a choice for a message: "a, b or c". The
// messages of the Parse functions take their lists from the lists the
// functions accept, so the two cannot part.
func alternatives[T ~string](values []T) string {
	names := make([]string, len(values))
	for i, v := range values {
		names[i] = string(v)
	}
	if len(names) < 2 {
		return strings.Join(names, "")
	}
	return strings.Join(names[:len(names)-1], ", ") + " or " + names[len(names)-1]
}
