package fleet_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gigafactory/fleet/shared/fleet"
)

// requireInvalid asserts err is an invalid_argument naming field.
func requireInvalid(t *testing.T, err error, field string) {
	t.Helper()
	var fe *fleet.Error
	require.ErrorAs(t, err, &fe)
	require.Equal(t, fleet.CodeInvalid, fe.Code, "%v", err)
	require.Equal(t, field, fe.Field, "%v", err)
	require.ErrorIs(t, err, fleet.ErrInvalid)
}

func TestValidateName(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in string
		ok bool
	}{
		{"a", true},
		{"Z", true},
		{"0", true},
		{"repo", true},
		{"learning_ai_notes", true},
		{"my-repo.v2", true},
		{"a.b-c_d", true},
		{"x-", true},
		{"x.", true},
		{"a..b", true},
		{"_private", true},
		{"0abc", true},
		{strings.Repeat("n", fleet.MaxNameLen), true},

		{"", false},
		{strings.Repeat("n", fleet.MaxNameLen+1), false},
		{"-rf", false},
		{"--help", false},
		{"-", false},
		{".", false},
		{"..", false},
		{".git", false},
		{"../x", false},
		{"a/b", false},
		{"a\\b", false},
		{"a b", false},
		{" a", false},
		{"a ", false},
		{"a\tb", false},
		{"a\nb", false},
		{"a\x00b", false},
		{"a\x7fb", false},
		{"a:b", false},
		{"a@b", false},
		{"a~1", false},
		{"a*", false},
		{"a?", false},
		{"$(id)", false},
		{"répo", false},
		{"日本", false},
		{"ｒｅｐｏ", false}, // full-width look-alikes
		{"a\u200bb", false},
		{"a\xffb", false},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%q", tt.in), func(t *testing.T) {
			t.Parallel()
			err := fleet.ValidateName("repo", tt.in)
			if tt.ok {
				require.NoError(t, err)
				return
			}
			requireInvalid(t, err, "repo")
		})
	}
}

func TestValidateCapability(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in string
		ok bool
	}{
		{"os:linux", true},
		{"engine:claude", true},
		{"has:git", true},
		{"node:20", true},
		{"node:20.11.1", true},
		{"repo:learning_ai_notes", true},
		{"repo:my-repo.v2", true},
		{"k_-9:v", true},
		{"has:a:b", true},              // the value may hold ':' outside repo:
		{"os:línux", true},             // values may be unicode
		{"lang:日本語", true},             // values may be unicode
		{"gpu:NVIDIA-A100/80GB", true}, // '/' is fine outside repo:
		{"x:" + strings.Repeat("v", fleet.MaxCapabilityLen-2), true},

		{"", false},
		{"build", false},
		{"linux", false},
		{":linux", false},
		{"os:", false},
		{":", false},
		{"x:" + strings.Repeat("v", fleet.MaxCapabilityLen-1), false},
		{"OS:linux", false},
		{"Os:linux", false},
		{"o.s:linux", false},
		{"os :linux", false},
		{" os:linux", false},
		{"ös:linux", false},
		{"os: linux", false},
		{"os:linux ", false},
		{"os:li nux", false},
		{"os:linux\t", false},
		{"os:linux\n", false},
		{"os:\x00", false},
		{"os:\x7f", false},
		{"os:\u0085", false}, // NEL
		{"os:\u00a0", false}, // no-break space
		{"os:\u3000", false}, // ideographic space
		{"os:linux\u200b", false},
		{"os:\u202elinux", false}, // right-to-left override
		{"os:linux\ufeff", false},
		{"os:\ue000", false}, // private use
		{"os:\ufffd", false},
		{"os:\xff", false},
		{"repo:../x", false},
		{"repo:-rf", false},
		{"repo:.git", false},
		{"repo:a/b", false},
		{"repo:a:b", false},
		{"repo:répo", false},
		{"repo:" + strings.Repeat("r", fleet.MaxNameLen+1), false},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%q", tt.in), func(t *testing.T) {
			t.Parallel()
			err := fleet.ValidateCapability("caps[3]", tt.in)
			if tt.ok {
				require.NoError(t, err)
				return
			}
			requireInvalid(t, err, "caps[3]")
		})
	}
}

// TestRepoCapabilityAgreesWithValidateName: a factory's repos become
// repo:<name> capabilities, so every valid repo name must make a valid
// capability and every invalid one an invalid capability.
func TestRepoCapabilityAgreesWithValidateName(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"r", "learning_ai_notes", "a.b", strings.Repeat("n", fleet.MaxNameLen),
		"", "-rf", "../x", "a/b", "a b", "répo", strings.Repeat("n", fleet.MaxNameLen+1)} {
		nameErr := fleet.ValidateName("repo", name)
		capErr := fleet.ValidateCapability("cap", fleet.RepoCapability(name))
		require.Equal(t, nameErr == nil, capErr == nil, "%q: name %v, capability %v", name, nameErr, capErr)
	}
	require.Equal(t, "repo:notes", fleet.RepoCapability("notes"))
}

func TestValidateCapabilities(t *testing.T) {
	t.Parallel()
	t.Run("dedupes in order", func(t *testing.T) {
		t.Parallel()
		in := []string{"has:git", "os:linux", "has:git", "engine:claude", "os:linux"}
		got, err := fleet.ValidateCapabilities("capabilities", in)
		require.NoError(t, err)
		require.Equal(t, []string{"has:git", "os:linux", "engine:claude"}, got)
		require.Equal(t, []string{"has:git", "os:linux", "has:git", "engine:claude", "os:linux"}, in, "input untouched")
	})
	t.Run("nil and empty give an empty list, not nil", func(t *testing.T) {
		t.Parallel()
		for _, in := range [][]string{nil, {}} {
			got, err := fleet.ValidateCapabilities("capabilities", in)
			require.NoError(t, err)
			require.NotNil(t, got)
			require.Empty(t, got)
		}
	})
	t.Run("names the bad entry", func(t *testing.T) {
		t.Parallel()
		got, err := fleet.ValidateCapabilities("heartbeat.capabilities", []string{"os:linux", "has:git", "build"})
		require.Nil(t, got)
		requireInvalid(t, err, "heartbeat.capabilities[2]")
	})
	t.Run("first bad entry wins", func(t *testing.T) {
		t.Parallel()
		_, err := fleet.ValidateCapabilities("c", []string{"os:linux", "x", "y"})
		requireInvalid(t, err, "c[1]")
	})
	t.Run("count limit", func(t *testing.T) {
		t.Parallel()
		caps := make([]string, fleet.MaxCapabilities+1)
		for i := range caps {
			caps[i] = fmt.Sprintf("has:t%d", i)
		}
		got, err := fleet.ValidateCapabilities("c", caps[:fleet.MaxCapabilities])
		require.NoError(t, err)
		require.Len(t, got, fleet.MaxCapabilities)
		_, err = fleet.ValidateCapabilities("c", caps)
		requireInvalid(t, err, "c")
	})
}

func TestValidateText(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		in   string
		max  int
		ok   bool
	}{
		{"empty", "", 10, true},
		{"plain", "Fix the login redirect", 100, true},
		{"tab, newline, CRLF", "a\tb\r\nc\n", 100, true},
		{"CRLF at the end", "a\r\n", 100, true},
		{"Arabic and Hebrew, no controls", "مرحبا שלום", 100, true},
		{"accents", "Ünïcødé", 100, true},
		{"CJK", "日本語のタイトル", 100, true},
		{"emoji", "ship it 🚀", 100, true},
		{"emoji joined with ZWJ", "👨‍👩‍👧", 100, true},
		{"combining marks", "e\u0301", 100, true},
		{"right at the limit", strings.Repeat("a", 10), 10, true},
		{"multi-byte right at the byte limit", "日本語", 9, true},

		{"one byte over", strings.Repeat("a", 11), 10, false},
		{"limit counts bytes, not characters", "日本語", 8, false},
		{"NUL", "a\x00b", 100, false},
		{"escape sequence", "\x1b[31mred", 100, false},
		{"bell", "a\ab", 100, false},
		{"vertical tab", "a\vb", 100, false},
		{"form feed", "a\fb", 100, false},
		{"DEL", "a\x7fb", 100, false},
		{"C1 control NEL", "a\u0085b", 100, false},
		{"lone carriage return", "safe\rrm -rf", 100, false},
		{"carriage return at the end", "a\r", 100, false},
		{"CR CR LF", "a\r\r\n", 100, false},
		{"right-to-left override", "invoice\u202efdp.exe", 100, false},
		{"left-to-right embedding", "a\u202ab", 100, false},
		{"first strong isolate", "a\u2068b\u2069", 100, false},
		{"right-to-left mark, which right-to-left writing uses", "a\u200fb", 100, true},
		{"Arabic letter mark", "a\u061cb", 100, true},
		{"invalid UTF-8", "a\xffb", 100, false},
		{"truncated UTF-8", "\xe6\x97", 100, false},
		{"overlong encoding", "\xc0\xaf", 100, false},
		{"surrogate half", "\xed\xa0\x80", 100, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := fleet.ValidateText("title", tt.in, tt.max)
			if tt.ok {
				require.NoError(t, err)
				return
			}
			requireInvalid(t, err, "title")
		})
	}
}
