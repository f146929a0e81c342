package cli

import (
	"bytes"
	"io"
	"regexp"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/gigafactory/fleet/shared/fleet"
)

// escapeRE matches terminal escape sequences (CSI, OSC, any other ESC
// pair) and the control characters but tab and newline, C1 included (some
// terminals read U+009B as CSI): what an engine, or whoever prompted it,
// could use to command the terminal showing its output.
var escapeRE = regexp.MustCompile(`\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(\x07|\x1b\\)|\x1b.|[\x00-\x08\x0b-\x1f\x7f\x{80}-\x{9f}]`)

// sgrRE is a colour sequence (SGR), the one escape kept in a log: it
// changes how text looks, never what the terminal shows or does.
var sgrRE = regexp.MustCompile(`^\x1b\[[0-9;]*m$`)

// partialEscapeRE is an escape sequence cut short at the end of a write:
// its rest may come with the next one.
var partialEscapeRE = regexp.MustCompile(`\x1b(?:\[[0-?]*[ -/]*|\][^\x07\x1b]*\x1b?)?$`)

// stripEscapes removes terminal escape sequences and control characters
// (a carriage return included) from s, keeping newlines and tabs.
func stripEscapes(s string) string { return escapeRE.ReplaceAllString(s, "") }

// stripEscapesKeepColour is stripEscapes keeping colour sequences, with
// bytes that are not UTF-8 written as U+FFFD (a stray 0x9b is CSI to an
// 8-bit terminal).
func stripEscapesKeepColour(b []byte) []byte {
	return escapeRE.ReplaceAllFunc(bytes.ToValidUTF8(b, []byte("\uFFFD")), func(m []byte) []byte {
		if sgrRE.Match(m) {
			return m
		}
		return nil
	})
}

// maxHeldEscape bounds what an escapeFilter holds back waiting for the rest
// of a sequence: an OSC that never ends is flushed (its ESC removed) past it.
const maxHeldEscape = 4 << 10

// escapeFilter writes to w what stripEscapesKeepColour keeps. A sequence or
// a UTF-8 character one write cuts in two is held until the next completes
// it, so it is judged whole (a split colour is kept, a split OSC removed
// whole rather than its text printed). Flush writes what is held.
type escapeFilter struct {
	w    io.Writer
	held []byte
}

func (f *escapeFilter) Write(p []byte) (int, error) {
	f.held = append(f.held, p...)
	cut := len(f.held)
	if loc := partialEscapeRE.FindIndex(f.held); loc != nil && len(f.held)-loc[0] <= maxHeldEscape {
		cut = loc[0]
	}
	// Never a character's first bytes without its last: the two halves
	// filtered apart could make a C1 control together.
	for i := cut - 1; i >= 0 && i >= cut-utf8.UTFMax; i-- {
		if utf8.RuneStart(f.held[i]) {
			if !utf8.FullRune(f.held[i:cut]) {
				cut = i
			}
			break
		}
	}
	if err := f.write(f.held[:cut]); err != nil {
		return 0, err
	}
	f.held = append(f.held[:0], f.held[cut:]...)
	return len(p), nil
}

// Flush writes what is held through the filter: the output ended, so a
// sequence still incomplete never will be.
func (f *escapeFilter) Flush() error {
	err := f.write(f.held)
	f.held = f.held[:0]
	return err
}

func (f *escapeFilter) write(b []byte) error {
	if len(b) == 0 {
		return nil
	}
	_, err := f.w.Write(stripEscapesKeepColour(b))
	return err
}

// display escapes what a value from the coordinator must not do on this
// terminal: control characters (tab and newline too, which would break a
// table's columns or forge its rows; a carriage return writes over the
// line) and the bidirectional controls, which make text display as other
// text. Titles and reasons stored before the API refused them may hold
// them, and a failure reason is the engine's output.
func display(s string) string {
	if !strings.ContainsFunc(s, needsEscape) {
		return s
	}
	var b strings.Builder
	for _, r := range s {
		fleet.WriteShown(&b, r, false)
	}
	return b.String()
}

func needsEscape(r rune) bool { return unicode.IsControl(r) || fleet.IsBidiControl(r) }
