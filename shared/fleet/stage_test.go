package fleet_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gigafactory/fleet/shared/fleet"
)

var (
	// t0 is the fixed "now" of the tests; nothing reads the wall clock.
	t0 = time.Date(2026, 5, 31, 12, 0, 0, 0, time.UTC)

	allActors = []fleet.Actor{fleet.ActorFactory, fleet.ActorOperator, fleet.ActorSystem}
)

type move struct {
	from, to fleet.Stage
	actor    fleet.Actor
}

func (m move) String() string { return fmt.Sprintf("%s->%s_by_%s", m.from, m.to, m.actor) }

// legalMoves is the stage machine written out a second time, on purpose: a
// change to fleet.Transitions fails TestTransitionTable until it is mirrored
// here, so nobody changes who may move a job, or what that does to its lease,
// by accident.
var legalMoves = map[move]fleet.LeaseEffect{
	// dependencies
	{fleet.StageQueued, fleet.StageBlocked, fleet.ActorSystem}: fleet.LeaseNone,
	{fleet.StageBlocked, fleet.StageQueued, fleet.ActorSystem}: fleet.LeaseNone,
	{fleet.StageBlocked, fleet.StageFailed, fleet.ActorSystem}: fleet.LeaseNone,
	// children: the parent waits in blocked, a holder giving its seat back
	{fleet.StageQueued, fleet.StageBlocked, fleet.ActorOperator}:  fleet.LeaseNone,
	{fleet.StageAssigned, fleet.StageBlocked, fleet.ActorFactory}: fleet.LeaseRelease,
	{fleet.StageBuilding, fleet.StageBlocked, fleet.ActorFactory}: fleet.LeaseRelease,
	{fleet.StageBlocked, fleet.StageShipped, fleet.ActorSystem}:   fleet.LeaseNone,
	// the factory's part
	{fleet.StageQueued, fleet.StageAssigned, fleet.ActorFactory}:     fleet.LeaseAcquire,
	{fleet.StageAssigned, fleet.StageBuilding, fleet.ActorFactory}:   fleet.LeaseKeep,
	{fleet.StageBuilding, fleet.StageReview, fleet.ActorFactory}:     fleet.LeaseRelease,
	{fleet.StageBuilding, fleet.StageTesting, fleet.ActorFactory}:    fleet.LeaseRelease,
	{fleet.StageBuilding, fleet.StageFailed, fleet.ActorFactory}:     fleet.LeaseRelease,
	{fleet.StageAssigned, fleet.StageFailed, fleet.ActorFactory}:     fleet.LeaseRelease,
	{fleet.StageBuilding, fleet.StageQueued, fleet.ActorFactory}:     fleet.LeaseRelease,
	{fleet.StageAssigned, fleet.StageQueued, fleet.ActorFactory}:     fleet.LeaseRelease,
	{fleet.StageBuilding, fleet.StageDeadLetter, fleet.ActorFactory}: fleet.LeaseRelease,
	{fleet.StageAssigned, fleet.StageDeadLetter, fleet.ActorFactory}: fleet.LeaseRelease,
	// a job with no gate is shipped by the factory that built it
	{fleet.StageBuilding, fleet.StageShipped, fleet.ActorFactory}: fleet.LeaseRelease,
	// the system takes a lease away: expiry, preemption, budget
	{fleet.StageAssigned, fleet.StageQueued, fleet.ActorSystem}:     fleet.LeaseRevoke,
	{fleet.StageBuilding, fleet.StageQueued, fleet.ActorSystem}:     fleet.LeaseRevoke,
	{fleet.StageAssigned, fleet.StageDeadLetter, fleet.ActorSystem}: fleet.LeaseRevoke,
	{fleet.StageBuilding, fleet.StageDeadLetter, fleet.ActorSystem}: fleet.LeaseRevoke,
	{fleet.StageBuilding, fleet.StageFailed, fleet.ActorSystem}:     fleet.LeaseRevoke,
	// gates
	{fleet.StageReview, fleet.StageTesting, fleet.ActorSystem}:    fleet.LeaseNone,
	{fleet.StageReview, fleet.StageTesting, fleet.ActorOperator}:  fleet.LeaseNone,
	{fleet.StageReview, fleet.StageFailed, fleet.ActorOperator}:   fleet.LeaseNone,
	{fleet.StageReview, fleet.StageQueued, fleet.ActorSystem}:     fleet.LeaseNone,
	{fleet.StageReview, fleet.StageFailed, fleet.ActorSystem}:     fleet.LeaseNone,
	{fleet.StageTesting, fleet.StageFailed, fleet.ActorOperator}:  fleet.LeaseNone,
	{fleet.StageTesting, fleet.StageShipped, fleet.ActorOperator}: fleet.LeaseNone,
	{fleet.StageReview, fleet.StageShipped, fleet.ActorOperator}:  fleet.LeaseNone,
	// requeue
	{fleet.StageFailed, fleet.StageQueued, fleet.ActorOperator}:     fleet.LeaseNone,
	{fleet.StageDeadLetter, fleet.StageQueued, fleet.ActorOperator}: fleet.LeaseNone,
	{fleet.StageCancelled, fleet.StageQueued, fleet.ActorOperator}:  fleet.LeaseNone,
	// requeue of a job whose dependencies have not shipped
	{fleet.StageFailed, fleet.StageBlocked, fleet.ActorOperator}:     fleet.LeaseNone,
	{fleet.StageDeadLetter, fleet.StageBlocked, fleet.ActorOperator}: fleet.LeaseNone,
	{fleet.StageCancelled, fleet.StageBlocked, fleet.ActorOperator}:  fleet.LeaseNone,
	// cancel
	{fleet.StageQueued, fleet.StageCancelled, fleet.ActorOperator}:  fleet.LeaseNone,
	{fleet.StageBlocked, fleet.StageCancelled, fleet.ActorOperator}: fleet.LeaseNone,
	// cancel of a leased job: acknowledged by the holder, or forced after the grace
	{fleet.StageAssigned, fleet.StageCancelled, fleet.ActorFactory}: fleet.LeaseRelease,
	{fleet.StageBuilding, fleet.StageCancelled, fleet.ActorFactory}: fleet.LeaseRelease,
	{fleet.StageAssigned, fleet.StageCancelled, fleet.ActorSystem}:  fleet.LeaseRevoke,
	{fleet.StageBuilding, fleet.StageCancelled, fleet.ActorSystem}:  fleet.LeaseRevoke,
	{fleet.StageReview, fleet.StageCancelled, fleet.ActorOperator}:  fleet.LeaseNone,
	{fleet.StageTesting, fleet.StageCancelled, fleet.ActorOperator}: fleet.LeaseNone,
	// The forge: feedback, a pull request closed, one merged.
	{fleet.StageTesting, fleet.StageQueued, fleet.ActorSystem}:    fleet.LeaseNone,
	{fleet.StageReview, fleet.StageCancelled, fleet.ActorSystem}:  fleet.LeaseNone,
	{fleet.StageTesting, fleet.StageCancelled, fleet.ActorSystem}: fleet.LeaseNone,
	{fleet.StageReview, fleet.StageShipped, fleet.ActorSystem}:    fleet.LeaseNone,
	{fleet.StageTesting, fleet.StageShipped, fleet.ActorSystem}:   fleet.LeaseNone,
	// Merged or closed during an iteration: the waiting iteration is
	// cancelled (a running one acknowledges a stop request as above).
	{fleet.StageQueued, fleet.StageCancelled, fleet.ActorSystem}:  fleet.LeaseNone,
	{fleet.StageBlocked, fleet.StageCancelled, fleet.ActorSystem}: fleet.LeaseNone,
}

func TestTransitionTable(t *testing.T) {
	t.Parallel()
	got := make(map[move]fleet.LeaseEffect, len(fleet.Transitions))
	for _, r := range fleet.Transitions {
		m := move{r.From, r.To, r.Actor}
		_, dup := got[m]
		require.False(t, dup, "%s listed twice", m)
		got[m] = r.Lease
		require.NotEmpty(t, r.Why, "%s has no Why", m)
	}
	require.Equal(t, legalMoves, got)
}

func TestStagesAndActors(t *testing.T) {
	t.Parallel()
	require.Equal(t, []fleet.Stage{"queued", "blocked", "assigned", "building", "review",
		"testing", "shipped", "failed", "dead_letter", "cancelled"}, fleet.Stages)

	terminal := map[fleet.Stage]bool{fleet.StageShipped: true, fleet.StageFailed: true,
		fleet.StageDeadLetter: true, fleet.StageCancelled: true}
	leased := map[fleet.Stage]bool{fleet.StageAssigned: true, fleet.StageBuilding: true}
	for _, s := range fleet.Stages {
		require.Equal(t, terminal[s], s.Terminal(), "%s.Terminal()", s)
		require.Equal(t, leased[s], s.Leased(), "%s.Leased()", s)
		require.False(t, s.Terminal() && s.Leased(), "%s is both terminal and leased", s)
	}
}

func TestParseStage(t *testing.T) {
	t.Parallel()
	for _, s := range fleet.Stages {
		got, err := fleet.ParseStage("stage", string(s))
		require.NoError(t, err)
		require.Equal(t, s, got)
	}
	for _, bad := range []string{"", "Queued", "QUEUED", " queued", "queued ", "deadletter", "dead-letter", "done", "inbox"} {
		_, err := fleet.ParseStage("filter.stage", bad)
		var fe *fleet.Error
		require.ErrorAs(t, err, &fe, "%q", bad)
		require.Equal(t, fleet.CodeInvalid, fe.Code, "%q", bad)
		require.Equal(t, "filter.stage", fe.Field, "%q", bad)
	}
}

// TestCheckTransitionEveryCombination asks about every (from, to, actor) over
// all stages, all actors and a few values that are neither.
func TestCheckTransitionEveryCombination(t *testing.T) {
	t.Parallel()
	stages := append(append([]fleet.Stage{}, fleet.Stages...), "", "bogus")
	actors := append(append([]fleet.Actor{}, allActors...), "", "admin")
	for _, from := range stages {
		for _, to := range stages {
			for _, actor := range actors {
				m := move{from, to, actor}
				t.Run(m.String(), func(t *testing.T) {
					t.Parallel()
					want, legal := legalMoves[m]
					rule, err := fleet.CheckTransition(from, to, actor)
					if legal {
						require.NoError(t, err)
						require.Equal(t, from, rule.From)
						require.Equal(t, to, rule.To)
						require.Equal(t, actor, rule.Actor)
						require.Equal(t, want, rule.Lease)
						require.NotEmpty(t, rule.Why)
						return
					}
					require.Error(t, err)
					require.Equal(t, fleet.Rule{}, rule)
					var ite *fleet.IllegalTransitionError
					require.ErrorAs(t, err, &ite)
					require.Equal(t, fleet.IllegalTransitionError{From: from, To: to, Actor: actor}, *ite)
					require.ErrorIs(t, err, fleet.ErrConflict)
					require.NotErrorIs(t, err, fleet.ErrFenced)
					require.NotErrorIs(t, err, fleet.ErrInvalid)
					require.Equal(t, fleet.CodeConflict, fleet.CodeOf(err))
					// wrapped, as a use case would return it
					wrapped := fmt.Errorf("patch job j1: %w", err)
					require.ErrorIs(t, wrapped, fleet.ErrConflict)
					require.Equal(t, fleet.CodeConflict, fleet.CodeOf(wrapped))
					require.Contains(t, err.Error(), fmt.Sprintf("%s -> %s by %s", from, to, actor))
				})
			}
		}
	}
}

func TestTransitionProperties(t *testing.T) {
	t.Parallel()
	for _, r := range fleet.Transitions {
		m := move{r.From, r.To, r.Actor}
		t.Run(m.String(), func(t *testing.T) {
			t.Parallel()
			require.NotEqual(t, r.From, r.To, "self-loop")

			// Nothing leaves a terminal stage except an operator's requeue
			// (to blocked when the job's dependencies have not shipped).
			if r.From.Terminal() {
				require.Contains(t, []fleet.Stage{fleet.StageQueued, fleet.StageBlocked}, r.To, "terminal stage left for something other than queued or blocked")
				require.Equal(t, fleet.ActorOperator, r.Actor, "terminal stage left by someone other than an operator")
			}

			// The lease effect follows from the leased-ness of both ends.
			switch {
			case !r.From.Leased() && r.To.Leased():
				require.Equal(t, fleet.LeaseAcquire, r.Lease, "entering a leased stage must acquire")
			case r.From.Leased() && !r.To.Leased():
				require.Contains(t, []fleet.LeaseEffect{fleet.LeaseRelease, fleet.LeaseRevoke}, r.Lease,
					"leaving a leased stage must release or revoke")
			case r.From.Leased() && r.To.Leased():
				require.Equal(t, fleet.LeaseKeep, r.Lease)
			default:
				require.Equal(t, fleet.LeaseNone, r.Lease, "no lease on either side")
			}

			// Only the holder acquires or gives up a lease; only the
			// coordinator or an operator takes one away.
			switch r.Lease {
			case fleet.LeaseAcquire, fleet.LeaseKeep, fleet.LeaseRelease:
				require.Equal(t, fleet.ActorFactory, r.Actor)
			case fleet.LeaseRevoke:
				require.NotEqual(t, fleet.ActorFactory, r.Actor)
			}

			// A factory acts only on a job it holds or is claiming.
			if r.Actor == fleet.ActorFactory {
				require.True(t, r.From.Leased() || r.Lease == fleet.LeaseAcquire)
			}
		})
	}
}

// TestStageGraph checks the table as a graph: every stage can be reached
// from submission, and every stage a job can sit in without an operator can
// still get to shipped.
func TestStageGraph(t *testing.T) {
	t.Parallel()
	next := map[fleet.Stage][]fleet.Stage{}
	for _, r := range fleet.Transitions {
		next[r.From] = append(next[r.From], r.To)
	}
	reach := func(from fleet.Stage) map[fleet.Stage]bool {
		seen := map[fleet.Stage]bool{from: true}
		todo := []fleet.Stage{from}
		for len(todo) > 0 {
			s := todo[0]
			todo = todo[1:]
			for _, n := range next[s] {
				if !seen[n] {
					seen[n] = true
					todo = append(todo, n)
				}
			}
		}
		return seen
	}
	fromQueued := reach(fleet.StageQueued)
	for _, s := range fleet.Stages {
		require.True(t, fromQueued[s], "%s is unreachable from queued", s)
		require.True(t, reach(s)[fleet.StageShipped], "%s can never ship", s)
	}
	require.Empty(t, next[fleet.StageShipped], "shipped is final")
}

func TestLeaseEffectString(t *testing.T) {
	t.Parallel()
	for e, want := range map[fleet.LeaseEffect]string{
		fleet.LeaseNone: "none", fleet.LeaseAcquire: "acquire", fleet.LeaseKeep: "keep",
		fleet.LeaseRelease: "release", fleet.LeaseRevoke: "revoke",
		fleet.LeaseEffect(5): "LeaseEffect(5)", fleet.LeaseEffect(-1): "LeaseEffect(-1)",
	} {
		require.Equal(t, want, e.String())
	}
}

// TestApply runs Job.Apply over every rule of the table from a job in the
// rule's From stage and checks what it did to stage, lease, dispatch and the
// fields that must survive.
func TestApply(t *testing.T) {
	t.Parallel()
	const (
		oldHolder     = "f-old"
		newHolder     = "f-new"
		epoch         = int64(7)
		dispatchEpoch = int64(4)
		checkpoint    = "aq/wip/j1@3f2a9c"
		ttl           = 90 * time.Second
	)
	queuedBefore := t0.Add(-time.Hour)
	oldExpiry := t0.Add(time.Minute)
	now := t0.Add(5 * time.Minute)

	for _, rule := range fleet.Transitions {
		m := move{rule.From, rule.To, rule.Actor}
		t.Run(m.String(), func(t *testing.T) {
			t.Parallel()
			j := &fleet.Job{
				ID: "j1", ProductID: "p1", Stage: rule.From,
				LeaseEpoch: epoch, DispatchEpoch: dispatchEpoch, TargetFactoryID: "f-target",
				Dispatch:   fleet.Dispatch{Unroutable: "no factory has engine:codex", DeadLettered: 2},
				Checkpoint: checkpoint, Attempts: 2, QueuedAt: queuedBefore,
				CreatedAt: t0.Add(-2 * time.Hour), UpdatedAt: t0.Add(-time.Minute),
			}
			if rule.From.Leased() {
				j.HolderFactoryID, j.LeaseExpiresAt = oldHolder, oldExpiry
				j.CancelRequested, j.PreemptRequested, j.StopRequestedAt = true, true, t0
				j.PreemptedBy = &fleet.JobRef{ProductID: "p1", JobID: "crit"}
			}

			j.Apply(rule, now, newHolder, ttl)

			// A stop request is addressed to one lease and ends with it.
			if rule.Lease == fleet.LeaseKeep {
				require.True(t, j.StopRequested())
			} else {
				require.False(t, j.StopRequested())
				require.True(t, j.StopRequestedAt.IsZero())
				require.Nil(t, j.PreemptedBy)
			}

			require.Equal(t, rule.To, j.Stage)
			require.Equal(t, now, j.UpdatedAt)
			require.Equal(t, t0.Add(-2*time.Hour), j.CreatedAt)
			// Crash recovery resumes from the checkpoint whatever happened
			// to the lease.
			require.Equal(t, checkpoint, j.Checkpoint)
			require.Equal(t, 2, j.Attempts)

			switch rule.Lease {
			case fleet.LeaseAcquire:
				require.Equal(t, epoch+1, j.LeaseEpoch, "acquire bumps the epoch")
				require.Equal(t, newHolder, j.HolderFactoryID)
				require.Equal(t, now.Add(ttl), j.LeaseExpiresAt)
				require.NoError(t, j.CheckFence(newHolder, epoch+1))
				require.ErrorIs(t, j.CheckFence(newHolder, epoch), fleet.ErrFenced)
			case fleet.LeaseKeep:
				require.Equal(t, epoch, j.LeaseEpoch)
				require.Equal(t, oldHolder, j.HolderFactoryID)
				require.Equal(t, oldExpiry, j.LeaseExpiresAt)
				require.NoError(t, j.CheckFence(oldHolder, epoch))
			case fleet.LeaseRelease:
				require.Equal(t, epoch, j.LeaseEpoch)
				require.Empty(t, j.HolderFactoryID)
				require.True(t, j.LeaseExpiresAt.IsZero())
				require.ErrorIs(t, j.CheckFence(oldHolder, epoch), fleet.ErrFenced)
			case fleet.LeaseRevoke:
				require.Equal(t, epoch+1, j.LeaseEpoch, "revoke bumps the epoch, fencing the old holder")
				require.Empty(t, j.HolderFactoryID)
				require.True(t, j.LeaseExpiresAt.IsZero())
				require.ErrorIs(t, j.CheckFence(oldHolder, epoch), fleet.ErrFenced)
			case fleet.LeaseNone:
				require.Equal(t, epoch, j.LeaseEpoch)
				require.Empty(t, j.HolderFactoryID)
				require.True(t, j.LeaseExpiresAt.IsZero())
			}

			// Stage and lease agree after every move.
			l, held := j.Lease()
			require.Equal(t, rule.To.Leased(), held)
			if held {
				require.Equal(t, fleet.Lease{JobID: "j1", HolderFactoryID: j.HolderFactoryID,
					LeaseEpoch: j.LeaseEpoch, ExpiresAt: j.LeaseExpiresAt}, l)
			}

			if rule.To == fleet.StageQueued {
				require.Equal(t, now, j.QueuedAt, "entering queued restarts the queue clock")
				require.Empty(t, j.TargetFactoryID, "entering queued clears the dispatch target")
				require.Empty(t, j.Dispatch.Unroutable)
				require.Equal(t, dispatchEpoch, j.DispatchEpoch, "the dispatcher, not Apply, bumps dispatchEpoch")
			} else {
				require.Equal(t, queuedBefore, j.QueuedAt)
				require.Equal(t, "f-target", j.TargetFactoryID)
				require.Equal(t, dispatchEpoch, j.DispatchEpoch)
			}
			require.Equal(t, 2, j.Dispatch.DeadLettered, "the dead-letter count survives requeues")
		})
	}
}

// TestReapScenario is the seed's §5 sequence on the domain alone: A claims,
// A's lease is revoked while it is away, B claims, and A's late write is
// fenced while B's goes through.
func TestReapScenario(t *testing.T) {
	t.Parallel()
	rule := func(from, to fleet.Stage, a fleet.Actor) fleet.Rule {
		r, err := fleet.CheckTransition(from, to, a)
		require.NoError(t, err)
		return r
	}
	j := &fleet.Job{ID: "j1", Stage: fleet.StageQueued}
	j.Apply(rule(fleet.StageQueued, fleet.StageAssigned, fleet.ActorFactory), t0, "A", time.Minute)
	require.Equal(t, int64(1), j.LeaseEpoch)
	j.Apply(rule(fleet.StageAssigned, fleet.StageBuilding, fleet.ActorFactory), t0, "", 0)
	j.Checkpoint = "aq/wip/j1"
	require.NoError(t, j.CheckFence("A", 1))

	later := t0.Add(2 * time.Minute)
	require.True(t, j.LeaseExpired(later))
	j.Apply(rule(fleet.StageBuilding, fleet.StageQueued, fleet.ActorSystem), later, "", 0)
	require.Equal(t, int64(2), j.LeaseEpoch)
	require.Equal(t, "aq/wip/j1", j.Checkpoint)
	require.False(t, j.LeaseExpired(later.Add(time.Hour)), "a queued job has no lease to expire")

	j.Apply(rule(fleet.StageQueued, fleet.StageAssigned, fleet.ActorFactory), later, "B", time.Minute)
	require.Equal(t, int64(3), j.LeaseEpoch)
	require.ErrorIs(t, j.CheckFence("A", 1), fleet.ErrFenced, "zombie A with its old epoch")
	require.ErrorIs(t, j.CheckFence("A", 3), fleet.ErrFenced, "A guessing the new epoch")
	require.NoError(t, j.CheckFence("B", 3))
	require.Equal(t, "aq/wip/j1", j.Checkpoint, "B resumes from A's checkpoint")

	_, err := fleet.CheckTransition(j.Stage, fleet.StageShipped, fleet.ActorFactory)
	require.True(t, errors.Is(err, fleet.ErrConflict), "a factory cannot ship what it has not started building")
}

// TestCheckJobTransitionGate: every legal move into testing or shipped is
// either through the gate or refused for a gated job, and allowed for an
// ungated one; moves elsewhere ignore the gate.
func TestCheckJobTransitionGate(t *testing.T) {
	t.Parallel()
	throughGate := map[move]bool{
		{fleet.StageReview, fleet.StageTesting, fleet.ActorSystem}:    true, // quorum reached
		{fleet.StageTesting, fleet.StageShipped, fleet.ActorOperator}: true, // already past the gate
		// Merged on the forge: the merge is the ship, whoever merged.
		{fleet.StageReview, fleet.StageShipped, fleet.ActorSystem}:  true,
		{fleet.StageTesting, fleet.StageShipped, fleet.ActorSystem}: true,
	}
	for m := range legalMoves {
		t.Run(m.String(), func(t *testing.T) {
			t.Parallel()
			ungated := &fleet.Job{ID: "j1", Stage: m.from}
			_, err := fleet.CheckJobTransition(ungated, m.to, m.actor)
			require.NoError(t, err)
			gated := &fleet.Job{ID: "j1", Stage: m.from, Review: &fleet.Review{Quorum: 1}}
			_, err = fleet.CheckJobTransition(gated, m.to, m.actor)
			if (m.to == fleet.StageTesting || m.to == fleet.StageShipped) && !throughGate[m] {
				require.ErrorIs(t, err, fleet.ErrConflict)
				require.Equal(t, fleet.CodeConflict, fleet.CodeOf(err))
				return
			}
			require.NoError(t, err)
		})
	}
	_, err := fleet.CheckJobTransition(&fleet.Job{Stage: fleet.StageQueued}, fleet.StageShipped, fleet.ActorOperator)
	var te *fleet.IllegalTransitionError
	require.ErrorAs(t, err, &te, "an illegal move stays illegal")
}

// TestStopOverdue: a stop request is overdue once the grace has passed since
// it was made, or as soon as the lease it names has expired.
func TestStopOverdue(t *testing.T) {
	t.Parallel()
	grace := time.Minute
	leased := func(mod func(j *fleet.Job)) *fleet.Job {
		j := &fleet.Job{ID: "j", Stage: fleet.StageBuilding, HolderFactoryID: "f", LeaseExpiresAt: t0.Add(time.Hour),
			CancelRequested: true, StopRequestedAt: t0}
		mod(j)
		return j
	}
	tests := []struct {
		name string
		j    *fleet.Job
		now  time.Time
		want bool
	}{
		{"within the grace", leased(func(*fleet.Job) {}), t0.Add(grace - time.Nanosecond), false},
		{"at the grace", leased(func(*fleet.Job) {}), t0.Add(grace), true},
		{"preemption past the grace", leased(func(j *fleet.Job) { j.CancelRequested, j.PreemptRequested = false, true }), t0.Add(grace), true},
		{"lease expired within the grace", leased(func(j *fleet.Job) { j.LeaseExpiresAt = t0.Add(time.Second) }), t0.Add(time.Second), true},
		{"nothing requested", leased(func(j *fleet.Job) { j.CancelRequested = false }), t0.Add(time.Hour), false},
		{"not leased", leased(func(j *fleet.Job) { j.Stage, j.HolderFactoryID = fleet.StageQueued, "" }), t0.Add(time.Hour), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.want, tt.j.StopOverdue(tt.now, grace))
		})
	}
}
