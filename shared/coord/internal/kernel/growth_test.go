package kernel

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gigafactory/fleet/shared/fleet"
)

// worst is n bytes of text whose every character costs the most encoded
// that its field's validation lets through.
func worst(kind string, n int) string {
	switch kind {
	case "sanitized": // SanitizeText lets '"', '\\', tab and newline through (2 each) and writes controls as \x1b (5 for 4)
		return fleet.SanitizeText(strings.Repeat("\"\\<\x01\u2028", n), n)
	case "validated": // ValidateText lets '"', '\\', tab, newline and U+2028 (6 for 3) through
		return strings.Repeat(`"`, n)
	case "raw": // what the forge or an engine sent, before any bound
		return strings.Repeat("\"<\x01\u2028\\", n)
	}
	return strings.Repeat("n", n) // a plain name or token
}

// TestWorstCaseGrowthFits: a job submitted at fleet.MaxSubmittedJobBytes
// whose every field that grows after submit is then filled to its cap with
// the characters that encode longest still fits the store's document limit
// as the store encodes it, within fleet.MaxGrowthBytes. (Encoded with HTML
// escaping, or with text bounded in Go bytes, 20 feedback bodies of '<'
// alone added about 1 MB to a job with 256 KiB of room.)
func TestWorstCaseGrowthFits(t *testing.T) {
	t.Parallel()
	name := func(i int) string { return fmt.Sprintf("%s%04d", worst("name", fleet.MaxNameLen-4), i) }
	at := time.Date(2026, 1, 2, 3, 4, 5, 123456789, time.UTC)
	j := &fleet.Job{ID: name(0), ProductID: name(1), Title: "t", Repo: name(2), Priority: fleet.PriorityNormal,
		Stage: fleet.StageQueued, Deps: []string{}, DepsMode: fleet.DepsAll, MaxAttempts: 3,
		Tracker:   &fleet.TrackerRef{Source: name(3), ItemID: worst("validated", fleet.MaxTrackerItemIDLen), Revision: 1 << 40},
		CreatedAt: at, UpdatedAt: at, QueuedAt: at}
	j.RecordEvent(fleet.Event{Type: fleet.EventSubmitted, To: j.Stage, Actor: fleet.ActorOperator})
	b, err := EncodeJob(j)
	require.NoError(t, err)
	j.Body = strings.Repeat("b", fleet.MaxSubmittedJobBytes-len(b))
	b, err = EncodeJob(j)
	require.NoError(t, err)
	require.Len(t, b, fleet.MaxSubmittedJobBytes)
	submitted := len(b)

	// Everything that can change after submit, at its cap.
	head := worst("validated", 1024)
	j.HolderFactoryID, j.TargetFactoryID, j.ClaimRequestID = name(4), name(5), name(6)
	j.LeaseEpoch, j.DispatchEpoch, j.Attempts, j.EventSeq, j.Iteration = 1<<40, 1<<40, 1<<20, 1<<40, fleet.MaxMaxIterations
	j.LeaseExpiresAt, j.LeaseAcquiredAt, j.StopRequestedAt, j.NotBefore = at, at, at, at
	j.CancelRequested, j.PreemptRequested, j.HasDependants, j.ForgeDue = true, true, true, true
	j.PreemptedBy = &fleet.JobRef{ProductID: name(7), JobID: name(8)}
	j.Admitted = &fleet.Admitted{LeaseEpoch: 1 << 40, Reservation: true, Seat: true}
	j.Dispatch = fleet.Dispatch{At: at, Unroutable: worst("raw", 10000), UnroutableKind: fleet.UnroutableNoFactory, DeadLettered: 1 << 20}
	j.Checkpoint = head
	j.LastFailure = &fleet.Failure{Reason: worst("raw", 20000), Kind: fleet.FailInvalidChildren, Retryable: true, FactoryID: name(9), At: at}
	j.RootID, j.ParentID, j.Depth = name(10), name(11), fleet.MaxTreeDepth
	for i := range fleet.MaxTreeJobs {
		j.Children = append(j.Children, name(i))
	}
	facts := fleet.EngineFacts{Session: worst("name", 128), Turns: 1_000_000, Model: worst("name", 128), LastActivityAt: at,
		Exit: &fleet.RunExit{Code: -1, Signal: worst("name", 32), Reason: fleet.ExitEngineIdle}}
	usage := fleet.Usage{USD: 123456789.123456, InputTokens: 1 << 50, OutputTokens: 1 << 50, CacheReadTokens: 1 << 50, CacheWriteTokens: 1 << 50}
	diff := &fleet.DiffStat{Files: 1 << 30, Insertions: 1 << 30, Deletions: 1 << 30}
	j.Report = &fleet.RunReport{LeaseEpoch: 1 << 40, Engine: worst("raw", 1000), Usage: usage, Head: head, Diff: diff, EngineFacts: facts}
	for i := range fleet.RunsKept + 3 {
		j.EndRun(fleet.Run{ID: fleet.RunID(j.ID, 1<<40+int64(i)), JobID: j.ID, ProductID: j.ProductID, FactoryID: name(i),
			LeaseEpoch: 1 << 40, Result: fleet.RunPreempted, Reason: worst("sanitized", fleet.MaxReasonLen),
			StartedAt: at, EndedAt: at, Engine: worst("raw", 1000), Usage: usage, Head: head, Diff: diff, EngineFacts: facts})
	}
	gate := &fleet.Review{Quorum: fleet.MaxReviewers, OnReject: fleet.RejectRequeue, Head: head,
		Feedback: worst("validated", fleet.MaxReviewCommentLen),
		Minimum:  &fleet.Gate{Quorum: fleet.MaxReviewers}}
	for i := range fleet.MaxReviewers {
		gate.Reviewers = append(gate.Reviewers, name(i))
		gate.Minimum.Reviewers = append(gate.Minimum.Reviewers, name(i+fleet.MaxReviewers))
	}
	for i := range fleet.MaxVotes {
		require.NoError(t, gate.Cast(fleet.Vote{Reviewer: name(i), Approve: i%2 == 0, Comment: worst("validated", fleet.MaxReviewCommentLen), Head: head, At: at}))
	}
	gate.Awaiting = slicesOf(fleet.MaxReviewers, name) // as if nobody had voted: the most Tally leaves
	j.Review = gate
	for range fleet.MaxRecentEvents + 5 {
		j.RecordEvent(fleet.Event{Type: fleet.EventCancelAcknowledged, From: fleet.StageDeadLetter, To: fleet.StageDeadLetter,
			Actor: fleet.ActorOperator, ActorID: worst("raw", 1000), Message: worst("raw", 10000),
			Data: json.RawMessage(`{"k":"` + strings.Repeat("v", 5000) + `"}`)})
	}
	j.RecentEvents = j.RecentEvents[len(j.RecentEvents)-fleet.MaxRecentEvents:]
	j.PullRequest = &fleet.PullRequest{Repo: worst("name", 140), Number: 1 << 30, URL: worst("raw", 5000), HeadSHA: worst("raw", 5000), State: fleet.PRMerged}
	j.PRSync = &fleet.PRSync{Attempts: 1 << 30, LastError: worst("sanitized", 500), NextAttemptAt: at}
	for i := range fleet.MaxFeedback + 5 {
		j.AddFeedback(fleet.Feedback{Iteration: i, Source: fleet.FeedbackCheck, Author: worst("raw", 1000), Name: worst("raw", 1000),
			Body: worst("raw", 3*fleet.MaxFeedbackBody), URL: worst("raw", 5000), At: at})
	}
	for i := range fleet.MaxForgeDeliveries + 5 {
		j.SeenDelivery(fmt.Sprintf("%d%s", i, worst("raw", 1000)))
	}

	b, err = EncodeJob(j)
	require.NoError(t, err)
	grown := len(b) - submitted
	t.Logf("submitted %d, grown by %d of %d allowed, stored %d of %d", submitted, grown, fleet.MaxGrowthBytes, len(b), fleet.MaxDocumentBytes)
	require.LessOrEqual(t, grown, fleet.MaxGrowthBytes)
	require.LessOrEqual(t, len(b), fleet.MaxDocumentBytes)
	require.Equal(t, fleet.MaxDocumentBytes, fleet.MaxSubmittedJobBytes+fleet.MaxGrowthBytes)
	require.Greater(t, fleet.MaxSubmittedJobBytes, fleet.MaxManifestBytes+64<<10, "a manifest at its limit still fits as a job")
}

func slicesOf(n int, f func(int) string) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = f(i)
	}
	return out
}
