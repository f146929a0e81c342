package fleet

import (
	"slices"
	"unicode/utf8"
)

// A job's growth after submit.
//
// A job is measured once, at submit, against MaxSubmittedJobBytes; every
// later write must still fit the store's MaxDocumentBytes, or each CAS on
// the job fails as too large and the job is stuck (no cancel, no ship, no
// reap). So the fields that grow after submit are bounded in the bytes the
// store is written with: job documents are encoded without HTML escaping
// (kernel's codec), where a character takes at most twice its UTF-8 bytes
// but for control characters, and every growing piece of free text is cut
// by its encoded size (BoundGrowth, applied to every job the kernel
// writes). Counts are bounded where the items are added. MaxGrowthBytes
// adds the worst case of each up; TestWorstCaseGrowthFits fills every
// growing field to its cap and checks the sum holds.

// Encoded caps of growing free text, in bytes of JSON string content.
const (
	// MaxEventMessageBytes bounds an event's message in the job's ring:
	// a failure reason fits whole; a review comment past it is kept whole
	// on the vote's rejection (review.feedback).
	MaxEventMessageBytes = MaxReasonLen + 100
	// MaxVoteCommentBytes bounds a vote's comment as the gate keeps it; a
	// rejection's whole comment is kept as review.feedback.
	MaxVoteCommentBytes = 1 << 10
	// MaxVotes bounds the votes a gate holds (one per reviewer).
	MaxVotes = MaxReviewers
	// MaxRecentEvents bounds a job's ring of recent events, which grows
	// past its usual few only while the events container refuses writes.
	MaxRecentEvents = 32

	maxHeadBytes       = 2 << 10 // a head or checkpoint: 1024 characters of validated text
	maxIDBytes         = 128     // a job, product or factory id, a reviewer's or actor's name
	maxTokenBytes      = 256     // an engine, a login, a delivery key
	maxURLBytes        = 1 << 10
	maxCheckNameBytes  = 2 * MaxCheckNameLen
	maxEventDataBytes  = 1 << 10
	maxPRSyncError     = 1 << 10
	maxUnroutableBytes = 2 << 10
	// itemOverhead is an item's keys, numbers, times and punctuation.
	itemOverhead = 512
)

// MaxGrowthBytes is the most a job's document grows after submit, encoded
// as the store writes it: the room MaxSubmittedJobBytes leaves.
const MaxGrowthBytes = MaxFeedback*(MaxFeedbackBody+maxTokenBytes+maxCheckNameBytes+maxURLBytes+itemOverhead) +
	RunsKept*(MaxReasonLen+maxHeadBytes+maxTokenBytes+4*maxIDBytes+3*maxTokenBytes+itemOverhead) +
	(MaxReasonLen + maxIDBytes + itemOverhead) + // lastFailure
	(MaxReviewCommentLen + maxHeadBytes + 3*MaxReviewers*(maxIDBytes+3) + itemOverhead) + // review, reviewers, awaiting, minimum
	MaxVotes*(maxIDBytes+MaxVoteCommentBytes+maxHeadBytes+itemOverhead) +
	MaxRecentEvents*(MaxEventMessageBytes+maxIDBytes+maxEventDataBytes+itemOverhead) +
	MaxForgeDeliveries*(maxTokenBytes+3) +
	MaxTreeJobs*(maxIDBytes+3) + // children
	(maxHeadBytes + 4*maxTokenBytes + itemOverhead) + // runReport
	maxHeadBytes + // checkpoint
	(maxPRSyncError + itemOverhead) +
	maxUnroutableBytes +
	(maxURLBytes + maxTokenBytes + 2*maxIDBytes + itemOverhead) + // pullRequest
	(maxTokenBytes + MaxTrackerItemIDLen*2 + itemOverhead) + // tracker, set with the submit
	4*itemOverhead // lease, stop request, preemptedBy, admitted, times and flags

// EncodedLen is at most how many bytes s takes inside a JSON string as the
// store encodes it (encoding/json without HTML escaping): '"', '\\', tab,
// newline and CR take 2, other control characters, U+2028, U+2029 and each
// byte that is not UTF-8 take 6.
func EncodedLen(s string) int {
	n := 0
	for i := 0; i < len(s); {
		r, w := utf8.DecodeRuneInString(s[i:])
		n += encodedRuneLen(r, w)
		i += w
	}
	return n
}

func encodedRuneLen(r rune, w int) int {
	switch {
	case r == utf8.RuneError && w == 1, r == '\u2028', r == '\u2029':
		return 6
	case r == '"', r == '\\', r == '\n', r == '\r', r == '\t':
		return 2
	case r < 0x20:
		return 6
	}
	return w
}

// CutEncoded returns s if EncodedLen(s) <= n, else s cut at a character
// boundary so that it, ending in TruncatedMark, takes at most n bytes
// encoded.
func CutEncoded(s string, n int) string {
	if len(s) <= n/6 || EncodedLen(s) <= n {
		return s
	}
	room := n - EncodedLen(TruncatedMark)
	if room < 0 {
		return ""
	}
	used, i := 0, 0
	for i < len(s) {
		r, w := utf8.DecodeRuneInString(s[i:])
		if used += encodedRuneLen(r, w); used > room {
			break
		}
		i += w
	}
	return s[:i] + TruncatedMark
}

// cut bounds *s to n encoded bytes and reports whether it changed it.
func cut(s *string, n int) bool {
	c := CutEncoded(*s, n)
	if len(c) == len(*s) {
		return false
	}
	*s = c
	return true
}

// boundEach bounds each item with bound, copying items before the first
// change: a caller's snapshot of the job may share the slice.
func boundEach[T any](items []T, bound func(*T) bool) []T {
	cloned := false
	for i := range items {
		v := items[i]
		if !bound(&v) {
			continue
		}
		if !cloned {
			items, cloned = slices.Clone(items), true
		}
		items[i] = v
	}
	return items
}

// BoundGrowth cuts every piece of free text that grows after submit to its
// encoded cap (see MaxGrowthBytes), so that the job, measured at submit,
// always fits the store. Text within its cap, which is all text but what a
// client or the forge sent at length, is left as it is. Nothing shared
// with a copy of the job is changed in place.
func (j *Job) BoundGrowth() {
	cut(&j.Checkpoint, maxHeadBytes)
	cut(&j.Dispatch.Unroutable, maxUnroutableBytes)
	if f := j.LastFailure; f != nil && EncodedLen(f.Reason) > MaxReasonLen {
		c := *f
		cut(&c.Reason, MaxReasonLen)
		j.LastFailure = &c
	}
	if r := j.Report; r != nil && (EncodedLen(r.Head) > maxHeadBytes || EncodedLen(r.Engine) > maxTokenBytes) {
		c := *r
		cut(&c.Head, maxHeadBytes)
		cut(&c.Engine, maxTokenBytes)
		j.Report = &c
	}
	if s := j.PRSync; s != nil && EncodedLen(s.LastError) > maxPRSyncError {
		c := *s
		cut(&c.LastError, maxPRSyncError)
		j.PRSync = &c
	}
	if pr := j.PullRequest; pr != nil && (EncodedLen(pr.URL) > maxURLBytes || EncodedLen(pr.HeadSHA) > maxTokenBytes) {
		c := *pr
		cut(&c.URL, maxURLBytes)
		cut(&c.HeadSHA, maxTokenBytes)
		j.PullRequest = &c
	}
	if rv := j.Review; rv != nil {
		changed := false
		votes := boundEach(rv.Votes, func(v *Vote) bool {
			c := cut(&v.Comment, MaxVoteCommentBytes)
			changed = changed || c
			return c
		})
		fb := rv.Feedback
		if cut(&fb, MaxReviewCommentLen) || changed {
			c := rv.Clone()
			c.Feedback, c.Votes = fb, votes
			j.Review = c
		}
	}
	j.Feedback = boundEach(j.Feedback, func(f *Feedback) bool {
		a := cut(&f.Body, MaxFeedbackBody)
		b := cut(&f.Author, maxTokenBytes)
		c := cut(&f.Name, maxCheckNameBytes)
		return cut(&f.URL, maxURLBytes) || a || b || c
	})
	j.Runs = boundEach(j.Runs, func(r *Run) bool {
		a := cut(&r.Reason, MaxReasonLen)
		b := cut(&r.Head, maxHeadBytes)
		return cut(&r.Engine, maxTokenBytes) || a || b
	})
	j.RecentEvents = boundEach(j.RecentEvents, func(ev *Event) bool {
		changed := cut(&ev.Message, MaxEventMessageBytes)
		if cut(&ev.ActorID, maxIDBytes) {
			changed = true
		}
		if len(ev.Data) > maxEventDataBytes {
			// Raw JSON cannot be cut; what it said is in the message.
			ev.Data, changed = nil, true
		}
		return changed
	})
	j.ForgeDeliveries = boundEach(j.ForgeDeliveries, func(k *string) bool { return cut(k, maxTokenBytes) })
}
