package agent

import (
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/gigafactory/fleet/shared/fleet"
)

// reasonHead is how much of the start of an over-long reason is kept (its
// kind and summary); the rest of the budget goes to its end, where an
// engine's last output says what went wrong.
const reasonHead = 1000

const elision = "\n…\n"

// SanitizeReason makes a failure reason plain, bounded text the
// coordinator accepts: terminal escape sequences (colours, titles,
// hyperlinks) are removed, carriage returns become newlines, every other
// control character except tab and newline is dropped, invalid UTF-8
// becomes U+FFFD, and a reason longer than fleet.MaxReasonLen keeps its start and
// its end. An engine's output must never make its own failure unreportable.
func SanitizeReason(s string) string {
	var b strings.Builder
	b.Grow(len(s))
	for i := 0; i < len(s); {
		c := s[i]
		if c == 0x1b {
			i = skipEscape(s, i)
			continue
		}
		if c == '\r' {
			b.WriteByte('\n')
			i++
			if i < len(s) && s[i] == '\n' {
				i++
			}
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		i += size
		switch {
		case r == utf8.RuneError && size == 1:
			b.WriteRune(utf8.RuneError)
		case r == '\t' || r == '\n':
			b.WriteRune(r)
		case unicode.IsControl(r):
		default:
			b.WriteRune(r)
		}
	}
	return bound(b.String(), fleet.MaxReasonLen)
}

// skipEscape returns the index after the escape sequence starting at s[i]
// (an ESC): CSI (ESC [ … final byte), string sequences (OSC, DCS, SOS, PM,
// APC: up to BEL or ESC \), or ESC with intermediates and a final byte. An
// unterminated sequence runs to the end of s.
func skipEscape(s string, i int) int {
	i++ // ESC
	if i >= len(s) {
		return i
	}
	switch s[i] {
	case '[':
		for i++; i < len(s); i++ {
			if s[i] >= 0x40 && s[i] <= 0x7e {
				return i + 1
			}
			if s[i] < 0x20 || s[i] > 0x3f {
				return i // malformed: drop what was read, keep the rest
			}
		}
		return i
	case ']', 'P', 'X', '^', '_':
		for i++; i < len(s); i++ {
			if s[i] == 0x07 {
				return i + 1
			}
			if s[i] == 0x1b && i+1 < len(s) && s[i+1] == '\\' {
				return i + 2
			}
		}
		return i
	}
	for ; i < len(s) && s[i] >= 0x20 && s[i] <= 0x2f; i++ {
	}
	if i < len(s) && s[i] >= 0x30 && s[i] <= 0x7e {
		i++
	}
	return i
}

// bound shortens s to at most n bytes, keeping its start and end whole
// runes apart.
func bound(s string, n int) string {
	if len(s) <= n {
		return s
	}
	head := s[:runeStart(s, reasonHead)]
	tail := s[runeEnd(s, len(s)-(n-len(head)-len(elision))):]
	return head + elision + tail
}

// runeStart is the largest rune boundary at or before i.
func runeStart(s string, i int) int {
	for i > 0 && !utf8.RuneStart(s[i]) {
		i--
	}
	return i
}

// runeEnd is the smallest rune boundary at or after i.
func runeEnd(s string, i int) int {
	for i < len(s) && !utf8.RuneStart(s[i]) {
		i++
	}
	return i
}
