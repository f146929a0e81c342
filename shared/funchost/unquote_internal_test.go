package funchost

import (
	"testing"

	"github.com/go-json-experiment/json/jsontext"
	"github.com/stretchr/testify/require"
)

// FuzzAppendUnquote: appendUnquote is jsontext.AppendUnquote, byte for byte
// and error for error, after any prefix already in dst.
func FuzzAppendUnquote(f *testing.F) {
	for _, s := range []string{
		`""`, `"plain"`, `"\"[{\\\"id\\\":\\\"a\\\"}]\""`, `"\b\f\n\r\t\/\\"`, `"\u00e9\u20AC"`,
		`"\ud83d\ude00"`, `"\ud800"`, `"\ud800\u0041"`, `"\udc00\ud800"`, `"\u12"`, `"\x"`, `"é€😀"`,
		"\"\xff\"", "\"\xe2\x82\"", "\"a\x01b\"", `"a" `, `"a"b"`, `"abc`, `"\`, `"`, `abc`, ``, `"\u00zz"`,
	} {
		f.Add([]byte("pre"), []byte(s))
		f.Add([]byte(nil), []byte(s))
	}
	f.Fuzz(func(t *testing.T, prefix, src []byte) {
		want, wantErr := jsontext.AppendUnquote(append([]byte(nil), prefix...), src)
		got, err := appendUnquote(append([]byte(nil), prefix...), src)
		if wantErr != nil {
			require.EqualError(t, err, wantErr.Error(), "%q", src)
		} else {
			require.NoError(t, err, "%q", src)
		}
		require.Equal(t, string(want), string(got), "%q", src)
	})
}

// TestUnquoteWellFormedTakesAJobBatch: the fast loop itself, not jsontext
// behind it, decodes what a batch is made of (escapes of every kind, UTF-8
// and \u escapes of it), so a change that sent every batch to the slow path
// would fail here rather than only cost time.
func TestUnquoteWellFormedTakesAJobBatch(t *testing.T) {
	t.Parallel()
	for _, src := range []string{
		`"\"[{\\\"id\\\":\\\"a\\\",\\\"title\\\":\\\"caf\\u00e9 \\ud83d\\ude00\\\"}]\""`,
		`"[{\"title\":\"café 😀\",\"body\":\"line\n\ttab\\/\"}]"`,
	} {
		want, err := jsontext.AppendUnquote(nil, src)
		require.NoError(t, err)
		got, ok := unquoteWellFormed([]byte("x"), []byte(src))
		require.True(t, ok, "%s", src)
		require.Equal(t, "x"+string(want), string(got))
	}
}
