package fleet_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gigafactory/fleet/shared/fleet"
)

// TestReviewVotes: votes are bound to the head, one per reviewer, only
// listed reviewers vote when reviewers are listed, and the quorum counts
// distinct approving reviewers.
func TestReviewVotes(t *testing.T) {
	t.Parallel()
	vote := func(who string, approve bool, head string) fleet.Vote {
		return fleet.Vote{Reviewer: who, Approve: approve, Head: head, At: t0}
	}
	tests := []struct {
		name         string
		reviewers    []string
		quorum       int
		votes        []fleet.Vote
		wantCode     fleet.Code // of the last vote
		wantApproved int
		wantAwaiting []string
		wantQuorum   bool
	}{
		{"two distinct of three make quorum 2", []string{"ann", "bob", "cy"}, 2,
			[]fleet.Vote{vote("ann", true, "h1"), vote("bob", true, "h1")}, "", 2, []string{"cy"}, true},
		{"the same reviewer twice counts once", []string{"ann", "bob", "cy"}, 2,
			[]fleet.Vote{vote("ann", true, "h1"), vote("ann", true, "h1")}, "", 1, []string{"bob", "cy"}, false},
		{"a changed mind replaces the earlier vote", []string{"ann", "bob"}, 1,
			[]fleet.Vote{vote("ann", true, "h1"), vote("ann", false, "h1")}, "", 0, []string{"bob"}, false},
		{"a reviewer not listed is forbidden", []string{"ann"}, 1,
			[]fleet.Vote{vote("mallory", true, "h1")}, fleet.CodeForbidden, 0, []string{"ann"}, false},
		{"a vote on another head is a conflict", []string{"ann"}, 1,
			[]fleet.Vote{vote("ann", true, "h0")}, fleet.CodeConflict, 0, []string{"ann"}, false},
		{"without listed reviewers any operator votes", nil, 2,
			[]fleet.Vote{vote("ann", true, "h1"), vote("zed", true, "h1")}, "", 2, nil, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := &fleet.Review{Reviewers: tc.reviewers, Quorum: tc.quorum}
			require.NoError(t, r.ValidateGate("review"))
			r.SetHead("h1")
			var err error
			for _, v := range tc.votes {
				err = r.Cast(v)
			}
			if tc.wantCode != "" {
				require.Equal(t, tc.wantCode, fleet.CodeOf(err))
			} else {
				require.NoError(t, err)
			}
			require.Equal(t, tc.wantApproved, r.Approvals)
			require.Equal(t, tc.wantAwaiting, r.Awaiting)
			require.Equal(t, tc.wantQuorum, r.QuorumReached())
		})
	}

	t.Run("a new head clears the votes, the same head keeps them", func(t *testing.T) {
		t.Parallel()
		r := &fleet.Review{Reviewers: []string{"ann", "bob"}, Quorum: 2}
		require.NoError(t, r.ValidateGate("review"))
		r.SetHead("h1")
		require.NoError(t, r.Cast(vote("ann", true, "h1")))
		r.SetHead("h1")
		require.Equal(t, 1, r.Approvals)
		r.SetHead("h2")
		require.Empty(t, r.Votes)
		require.Equal(t, 0, r.Approvals)
		require.Equal(t, []string{"ann", "bob"}, r.Awaiting)
	})
}
