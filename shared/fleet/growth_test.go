package fleet

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"
)

// storeEncoded is s as the store encodes it: encoding/json without HTML
// escaping, quotes dropped.
func storeEncoded(t *testing.T, s string) string {
	t.Helper()
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	require.NoError(t, enc.Encode(s))
	out := strings.TrimSuffix(buf.String(), "\n")
	return out[1 : len(out)-1]
}

func TestEncodedLen(t *testing.T) {
	t.Parallel()
	for _, s := range []string{"", "plain", "<>&", `"\`, "\t\n\r", "\x00\x01\x1b\x1f\x7f", "\u2028\u2029", "é€😀", "\u202e", "a\xffb"} {
		got, enc := EncodedLen(s), storeEncoded(t, s)
		require.GreaterOrEqual(t, got, len(enc), "%q encodes as %s", s, enc)
		if utf8.ValidString(s) && !strings.ContainsAny(s, "\x00\x01\x1b\x1f") {
			require.Equal(t, len(enc), got, "%q encodes as %s", s, enc)
		}
	}
}

func TestCutEncoded(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		s string
		n int
	}{
		{strings.Repeat("<", 10000), 8192},
		{strings.Repeat(`"`, 10000), 8192},
		{strings.Repeat("\x01", 10000), 4000},
		{strings.Repeat("\u2028", 3000), 1000},
		{strings.Repeat("é\\", 3000), 1001},
		{"short", 8},
		{"longer than that", 3},
	} {
		got := CutEncoded(tc.s, tc.n)
		require.LessOrEqual(t, len(storeEncoded(t, got)), tc.n, "%.20q cut to %d", tc.s, tc.n)
		require.LessOrEqual(t, EncodedLen(got), tc.n)
		if EncodedLen(tc.s) <= tc.n {
			require.Equal(t, tc.s, got)
		} else if tc.n >= EncodedLen(TruncatedMark) {
			require.True(t, strings.HasSuffix(got, TruncatedMark))
			require.Greater(t, EncodedLen(got), tc.n-6-EncodedLen(TruncatedMark), "cut no shorter than it must")
		}
	}
}

// TestBoundGrowthSharesNothing: bounding a job copies what it changes, so
// a snapshot of the job before (a transition's before) keeps its text.
func TestBoundGrowthSharesNothing(t *testing.T) {
	t.Parallel()
	long := strings.Repeat(`"`, 3*MaxFeedbackBody)
	j := &Job{
		Feedback:     []Feedback{{Body: long}},
		Runs:         []Run{{Reason: long}},
		RecentEvents: []Event{{Message: long}},
		LastFailure:  &Failure{Reason: long},
		Review:       &Review{Feedback: long, Votes: []Vote{{Reviewer: "r", Comment: long}}},
	}
	before := *j
	j.BoundGrowth()
	require.Equal(t, long, before.Feedback[0].Body)
	require.Equal(t, long, before.Runs[0].Reason)
	require.Equal(t, long, before.RecentEvents[0].Message)
	require.Equal(t, long, before.LastFailure.Reason)
	require.Equal(t, long, before.Review.Feedback)
	require.Equal(t, long, before.Review.Votes[0].Comment)
	require.LessOrEqual(t, EncodedLen(j.Feedback[0].Body), MaxFeedbackBody)
	require.LessOrEqual(t, EncodedLen(j.Review.Votes[0].Comment), MaxVoteCommentBytes)
}

// TestVotesBounded: a gate listing no reviewers keeps at most MaxVotes
// votes; a reviewer who voted may still change their vote.
func TestVotesBounded(t *testing.T) {
	t.Parallel()
	r := &Review{Head: "h"}
	for i := range MaxVotes {
		require.NoError(t, r.Cast(Vote{Reviewer: fmt.Sprintf("r%d", i), Approve: true, Head: "h"}))
	}
	err := r.Cast(Vote{Reviewer: "one-more", Approve: true, Head: "h"})
	require.Error(t, err)
	require.Equal(t, CodeConflict, err.(*Error).Code)
	require.NoError(t, r.Cast(Vote{Reviewer: "r0", Approve: false, Head: "h"}))
	require.Len(t, r.Votes, MaxVotes)
}
