// Package secret resolves a secret setting that can be given either as its
// value or as a file holding it: the GitHub token and webhook secret of the
// coordinator, fleetctl's operator token, a factory's token. A file keeps
// the secret out of argv and the process environment; a value is what a
// Key Vault reference resolves to. One rule for all of them, so that each
// refuses the same mistakes the same way.
package secret

import (
	"fmt"
	"os"
	"strings"
)

// Setting is one secret setting as it was given. The names are how the
// user knows each half (a variable, or a flag and its variable), so that
// an error names the one they got wrong; the errors never hold the secret.
type Setting struct {
	Value     string // the secret itself, if given
	ValueName string
	File      string // the path of a file holding it, if given
	FileName  string
}

// Resolve returns the secret: the value, or the file's content, without
// surrounding whitespace (the newline an editor or echo leaves); "" when
// neither is given. Both given is refused, since which one wins would be a
// guess. A file that cannot be read, or holds nothing, is refused: an
// empty token would only fail later, further from its cause.
func Resolve(s Setting) (string, error) {
	if s.Value != "" && s.File != "" {
		return "", fmt.Errorf("%s and %s are both set: give one, not both", s.ValueName, s.FileName)
	}
	if s.File == "" {
		return strings.TrimSpace(s.Value), nil
	}
	b, err := os.ReadFile(s.File)
	if err != nil {
		return "", fmt.Errorf("%s: %w", s.FileName, err)
	}
	v := strings.TrimSpace(string(b))
	if v == "" {
		return "", fmt.Errorf("%s: %s is empty", s.FileName, s.File)
	}
	return v, nil
}
