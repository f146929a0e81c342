package funchost

import (
	"slices"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/go-json-experiment/json/jsontext"
)

// appendUnquote is jsontext.AppendUnquote, faster on what a change-feed
// batch is made of: the host quotes the array of documents twice, so
// nearly one byte in ten of the outer string is an escape, and
// jsontext's general loop (a rune decode per escape, an append per run)
// took more than half of decoding a batch. Whatever the fast loop does not
// handle alone (invalid UTF-8, an unpaired surrogate, a control
// character, anything after the closing quote) goes to jsontext as
// before, so the result and the error are always jsontext's
// (FuzzAppendUnquote).
func appendUnquote(dst, src []byte) ([]byte, error) {
	if out, ok := unquoteWellFormed(dst, src); ok {
		return out, nil
	}
	return jsontext.AppendUnquote(dst, src)
}

// unquoteWellFormed appends the value of the JSON string literal src to dst
// and reports true, or reports false, leaving dst's contents as they were,
// when src is not one well-formed literal and nothing after it.
func unquoteWellFormed(dst, src []byte) ([]byte, bool) {
	if len(src) < 2 || src[0] != '"' {
		return dst, false
	}
	start := len(dst)
	// The value is never longer than its literal: each escape is at least
	// as long as what it stands for.
	dst = slices.Grow(dst, len(src))
	out := dst[start : start+len(src)]
	w := 0
	for n := 1; n < len(src); {
		c := src[n]
		switch {
		case c >= ' ' && c < utf8.RuneSelf && c != '\\' && c != '"':
			out[w] = c
			w++
			n++
		case c == '"':
			if n != len(src)-1 {
				return dst[:start], false
			}
			return dst[:start+w], true
		case c == '\\':
			if n+1 >= len(src) {
				return dst[:start], false
			}
			switch e := src[n+1]; e {
			case '"', '\\', '/':
				out[w] = e
			case 'b':
				out[w] = '\b'
			case 'f':
				out[w] = '\f'
			case 'n':
				out[w] = '\n'
			case 'r':
				out[w] = '\r'
			case 't':
				out[w] = '\t'
			case 'u':
				r, size := escapedRune(src[n:])
				if size == 0 {
					return dst[:start], false
				}
				w += utf8.EncodeRune(out[w:], r)
				n += size
				continue
			default:
				return dst[:start], false
			}
			w++
			n += 2
		case c >= utf8.RuneSelf:
			r, size := utf8.DecodeRune(src[n:])
			if r == utf8.RuneError && size == 1 {
				return dst[:start], false
			}
			w += copy(out[w:], src[n:n+size])
			n += size
		default: // a control character
			return dst[:start], false
		}
	}
	return dst[:start], false // no closing quote
}

// escapedRune decodes the \uXXXX escape at the start of b, or a surrogate
// pair of two, and returns the rune and the bytes it took; 0 bytes when it
// is not a whole, valid escape (jsontext decides what that is).
func escapedRune(b []byte) (rune, int) {
	v1, ok := hex4(b)
	if !ok {
		return 0, 0
	}
	r := rune(v1)
	if !utf16.IsSurrogate(r) {
		return r, 6
	}
	v2, ok := hex4(b[6:])
	if !ok {
		return 0, 0
	}
	if r = utf16.DecodeRune(r, rune(v2)); r == utf8.RuneError {
		return 0, 0
	}
	return r, 12
}

// hex4 parses the XXXX of a \uXXXX at the start of b.
func hex4(b []byte) (uint16, bool) {
	if len(b) < 6 || b[0] != '\\' || b[1] != 'u' {
		return 0, false
	}
	var v uint16
	for _, c := range b[2:6] {
		switch {
		case c >= '0' && c <= '9':
			c -= '0'
		case c >= 'a' && c <= 'f':
			c -= 'a' - 10
		case c >= 'A' && c <= 'F':
			c -= 'A' - 10
		default:
			return 0, false
		}
		v = v<<4 | uint16(c)
	}
	return v, true
}
