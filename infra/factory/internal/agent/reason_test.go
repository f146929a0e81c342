package agent

import (
	"context"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/gigafactory/fleet/infra/factory/internal/transport"
	"github.com/gigafactory/fleet/shared/fleet"
)

// TestFailReasonSanitised: an engine's coloured output in a failure report
// becomes plain, bounded text that passes the server's own rule for the
// field (no control characters, valid UTF-8, at most fleet.MaxReasonLen
// bytes), so /fail is never refused for its reason.
func TestFailReasonSanitised(t *testing.T) {
	t.Parallel()
	long := "crash: engine x exited 1; last output:\n" + strings.Repeat("\x1b[31mERROR\x1b[0m é\r\n", 800)
	tests := []struct {
		name, reason, want string
	}{
		{name: "colours", reason: "crash: \x1b[1;31mboom\x1b[0m done", want: "crash: boom done"},
		{name: "osc title and bell", reason: "x\x1b]0;title\x07y\x1b]8;;http://e\x1b\\z", want: "xyz"},
		{name: "other controls", reason: "a\x00b\x08c\td\ne\x7f\u0085f", want: "abc\td\nef"},
		{name: "carriage returns of a progress bar", reason: "10%\r50%\r100%\r\ndone", want: "10%\n50%\n100%\ndone"},
		{name: "invalid utf-8", reason: "bad \xff\xfe byte", want: "bad \uFFFD\uFFFD byte"},
		{name: "lone escape at the end", reason: "end\x1b", want: "end"},
		{name: "plain", reason: "git_error: push: rejected", want: "git_error: push: rejected"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.want, SanitizeReason(tt.reason))
		})
	}

	var sent string
	for _, reason := range []string{"crash: \x1b[31mred\x1b[0m", long} {
		sent = SanitizeReason(reason)
		// The coordinator's rule for the field (coord.Fail).
		require.NoError(t, fleet.ValidateText("reason", sent, fleet.MaxReasonLen), "a failure report is never refused for its text")
		require.LessOrEqual(t, len(sent), fleet.MaxReasonLen)
		require.True(t, utf8.ValidString(sent))
		require.NotContains(t, sent, "\x1b")
		require.True(t, strings.HasPrefix(sent, "crash: "), "the kind survives: %q", sent[:min(len(sent), 40)])
	}
	require.Contains(t, sent, "ERROR é", "the tail of the output survives")
}

// TestEngineFailureReportedSanitised: a run whose engine fails with
// coloured output reports the failure with that output as plain text.
func TestEngineFailureReportedSanitised(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	repo := newGitRepo(t, root)
	coord := newFakeCoord("j1", "app")
	a := newGitAgent(t, root, repo, coord, `sh -c 'printf "\033[1;31mboom\033[0m\r\n"; exit 3'`)
	r := a.handle(context.Background(), transport.Delivery{ID: "claim:j1:1", Claimed: coord.claim()})
	require.Equal(t, OutcomeFailed, waitRun(t, r, "the run"))
	a.jobs.Wait()

	coord.mu.Lock()
	defer coord.mu.Unlock()
	require.Len(t, coord.fails, 1)
	require.Contains(t, coord.fails[0], "last output:\nboom")
	require.NotContains(t, coord.fails[0], "\x1b")
	require.NotContains(t, coord.fails[0], "\r")
}
