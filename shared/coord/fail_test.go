package coord_test

import (
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/gigafactory/fleet/shared/coord"
	"github.com/gigafactory/fleet/shared/coord/catalog"
	"github.com/gigafactory/fleet/shared/fleet"
)

// TestFailTerminal: a non-retryable failure ends in `failed` with the lease
// gone at once, the failure recorded, and nothing left to claim.
func TestFailTerminal(t *testing.T) {
	t.Parallel()
	for _, stage := range []fleet.Stage{fleet.StageAssigned, fleet.StageBuilding} {
		t.Run(string(stage), func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			e.factory("f1")
			e.factory("f2")
			j := e.submit()
			cl := e.claim("f1")
			if stage == fleet.StageBuilding {
				_, err := e.c.Patch(e.ctx, "f1", prod, j.ID, coord.PatchRequest{Stage: fleet.StageBuilding, LeaseEpoch: cl.LeaseEpoch})
				require.NoError(t, err)
			}
			v0 := e.queueVersion()
			got, err := e.c.Fail(e.ctx, "f1", prod, j.ID, coord.FailRequest{LeaseEpoch: cl.LeaseEpoch, Reason: "tests do not compile"})
			require.NoError(t, err)
			require.Equal(t, fleet.StageFailed, got.Stage)
			require.Empty(t, got.HolderFactoryID, "the lease is released at once")
			require.True(t, got.LeaseExpiresAt.IsZero())
			require.Equal(t, 1, got.Attempts, "the failed run was an attempt: the job reads 1 of 3, not 0 of 3")
			require.Equal(t, &fleet.Failure{Reason: "tests do not compile", FactoryID: "f1", At: t0}, got.LastFailure)
			require.Equal(t, got, e.job(j.ID))
			require.Equal(t, v0, e.queueVersion())

			left, err := e.c.Claim(e.ctx, e.as("f2"))
			require.NoError(t, err)
			require.Nil(t, left, "a failed job is not claimable")
			_, ok := got.Lease()
			require.False(t, ok)

			runs, err := e.c.Runs(e.ctx, prod, j.ID)
			require.NoError(t, err)
			require.Len(t, runs, 1)
			require.Equal(t, fleet.RunFailed, runs[0].Result)
			require.Equal(t, "tests do not compile", runs[0].Reason)
			evs := e.events(j.ID)
			requireContiguous(t, evs)
			require.Equal(t, fleet.EventFailed, evs[len(evs)-1].Type)
		})
	}
}

// TestFailRetryBackoff: retryable failures requeue the job with an
// exponential backoff (30s, 60s, …) during which nobody can claim it,
// release the lease at once so another factory takes it after the backoff,
// and dead-letter it on the MaxAttempts-th failure.
func TestFailRetryBackoff(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.factory("f1")
	e.factory("f2")
	j := e.submit("maxAttempts: 3")
	require.Equal(t, 3, j.MaxAttempts)

	claimers := []string{"f1", "f2", "f1"}
	wantBackoff := []time.Duration{30 * time.Second, 60 * time.Second}
	epoch := int64(0)
	for attempt, factoryID := range claimers {
		cl := e.claim(factoryID)
		require.Equal(t, j.ID, cl.Job.ID)
		require.Greater(t, cl.LeaseEpoch, epoch)
		epoch = cl.LeaseEpoch
		v0 := e.queueVersion()
		got, err := e.c.Fail(e.ctx, factoryID, prod, j.ID, coord.FailRequest{LeaseEpoch: cl.LeaseEpoch, Reason: "flaky network", Retryable: true})
		require.NoError(t, err)
		require.Equal(t, attempt+1, got.Attempts)
		require.Empty(t, got.HolderFactoryID, "the lease is released at once")
		require.Equal(t, cl.LeaseEpoch, got.LeaseEpoch, "a release does not bump the epoch; the next claim does")
		require.True(t, got.LastFailure.Retryable)
		require.Equal(t, factoryID, got.LastFailure.FactoryID)

		if attempt == len(claimers)-1 {
			require.Equal(t, fleet.StageDeadLetter, got.Stage, "the 3rd retryable failure of a maxAttempts: 3 job dead-letters it")
			require.Equal(t, v0, e.queueVersion())
			break
		}
		require.Equal(t, fleet.StageQueued, got.Stage)
		require.Equal(t, e.clock.Now().Add(wantBackoff[attempt]), got.NotBefore)
		require.Equal(t, v0+1, e.queueVersion())

		// Backing off: not claimable by anyone until NotBefore.
		e.clock.Advance(wantBackoff[attempt] - time.Second)
		for _, f := range []string{"f1", "f2"} {
			none, err := e.c.Claim(e.ctx, e.as(f))
			require.NoError(t, err)
			require.Nil(t, none, "claimed during backoff (attempt %d)", attempt+1)
		}
		e.clock.Advance(time.Second)
	}

	got := e.job(j.ID)
	require.Equal(t, fleet.StageDeadLetter, got.Stage)
	require.Equal(t, 3, got.Attempts)
	none, err := e.c.Claim(e.ctx, e.as("f1"))
	require.NoError(t, err)
	require.Nil(t, none, "a dead-lettered job is not claimable")

	runs, err := e.c.Runs(e.ctx, prod, j.ID)
	require.NoError(t, err)
	require.Len(t, runs, 3)
	for i, r := range runs {
		require.Equal(t, fleet.RunFailed, r.Result)
		require.Equal(t, claimers[i], r.FactoryID)
	}
	evs := e.events(j.ID)
	requireContiguous(t, evs)
	require.Equal(t, []string{"submitted", "claimed", "failed", "claimed", "failed", "claimed", "failed"}, eventTypes(evs))
}

// TestFailBackoffCap: the backoff doubles per attempt up to MaxRetryBackoff.
func TestFailBackoffCap(t *testing.T) {
	t.Parallel()
	e := newEnv(t, withConfig(coord.Config{RetryBackoff: 10 * time.Second, MaxRetryBackoff: 25 * time.Second}))
	e.factory("f1")
	j := e.submit("maxAttempts: 5")
	for _, want := range []time.Duration{10 * time.Second, 20 * time.Second, 25 * time.Second, 25 * time.Second} {
		cl := e.claim("f1")
		got, err := e.c.Fail(e.ctx, "f1", prod, j.ID, coord.FailRequest{LeaseEpoch: cl.LeaseEpoch, Reason: "again", Retryable: true})
		require.NoError(t, err)
		require.Equal(t, fleet.StageQueued, got.Stage)
		require.Equal(t, want, got.NotBefore.Sub(e.clock.Now()))
		e.clock.Advance(want)
	}
}

// TestRequeueResetsAttempts: an operator's requeue of a failed or
// dead-lettered job is a fresh start: attempts back to 0, claimable now.
func TestRequeueResetsAttempts(t *testing.T) {
	t.Parallel()
	for _, retryable := range []bool{false, true} {
		name := "failed"
		if retryable {
			name = "dead_letter"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			tok := e.factory("f1")
			j := e.submit("maxAttempts: 2")
			cl := e.claim("f1")
			_, err := e.c.Fail(e.ctx, "f1", prod, j.ID, coord.FailRequest{LeaseEpoch: cl.LeaseEpoch, Reason: "r", Retryable: true})
			require.NoError(t, err)
			e.clock.Advance(time.Hour)
			e.beat(tok)
			cl = e.claim("f1")
			failed, err := e.c.Fail(e.ctx, "f1", prod, j.ID, coord.FailRequest{LeaseEpoch: cl.LeaseEpoch, Reason: "r", Retryable: retryable})
			require.NoError(t, err)
			require.Equal(t, fleet.Stage(name), failed.Stage)
			require.NotZero(t, failed.Attempts)

			v0 := e.queueVersion()
			got, err := e.c.Act(e.ctx, "alice", prod, j.ID, coord.ActionRequeue, "fixed the flake")
			require.NoError(t, err)
			require.Equal(t, fleet.StageQueued, got.Stage)
			require.Zero(t, got.Attempts)
			require.False(t, got.NotBefore.After(e.clock.Now()))
			require.Equal(t, v0+1, e.queueVersion())
			again := e.claim("f1")
			require.Equal(t, j.ID, again.Job.ID, "claimable at once after a requeue")
			ev := e.events(j.ID)
			require.Equal(t, fleet.Event{
				ID: fleet.EventID(j.ID, got.EventSeq), JobID: j.ID, ProductID: prod, Seq: got.EventSeq,
				Type: "requeue", From: fleet.Stage(name), To: fleet.StageQueued, Actor: fleet.ActorOperator,
				ActorID: "alice", Message: "fixed the flake", At: e.clock.Now(),
			}, ev[got.EventSeq-1])
		})
	}
}

// TestFailValidation: a failure of a job that does not exist changes nothing.
func TestFailValidation(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.factory("f1")
	e.submit()
	cl := e.claim("f1")
	before := e.rawJob(cl.Job.ID)
	_, err := e.c.Fail(e.ctx, "f1", prod, "nope", coord.FailRequest{LeaseEpoch: cl.LeaseEpoch, Reason: "r"})
	require.ErrorIs(t, err, fleet.ErrNotFound)
	require.Equal(t, before, e.rawJob(cl.Job.ID))
}

// TestFailReasonNeverRefused: a failure report is accepted whatever its
// reason says (an engine's coloured output, NUL bytes, bytes that are not
// UTF-8, megabytes of log, nothing at all); the reason is stored escaped and
// bounded. Refusing it would leave the job leased until expiry and retry it
// to dead_letter instead of failing it.
func TestFailReasonNeverRefused(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("é", 10_000) // 20,000 bytes
	for _, tc := range []struct {
		name, reason, want string
	}{
		{"ansi colours", "\x1b[31merror\x1b[0m: build failed", `\x1b[31merror\x1b[0m: build failed`},
		{"nul and bell", "bad\x00byte\a", `bad\x00byte\x07`},
		{"carriage return", "progress 10%\rdone", `progress 10%\x0ddone`},
		{"newline and tab kept", "line one\n\tline two", "line one\n\tline two"},
		{"c1 control", "a\u0085b", `a\u0085b`},
		{"bidi override", "user\u202egnp.exe", `user\u202egnp.exe`},
		{"invalid utf-8", "caf\xe9 au lait", "caf\ufffd au lait"},
		{"empty", "", "no reason given"},
		{"blank", " \n ", "no reason given"},
		// Cut at a character boundary: é is two bytes.
		{"too long", long, long[:(fleet.MaxReasonLen-len(fleet.TruncatedMark))/2*2] + fleet.TruncatedMark},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			e.factory("f1")
			e.submit()
			cl := e.claim("f1")
			got, err := e.c.Fail(e.ctx, "f1", prod, cl.Job.ID, coord.FailRequest{LeaseEpoch: cl.LeaseEpoch, Reason: tc.reason})
			require.NoError(t, err)
			require.Equal(t, fleet.StageFailed, got.Stage)
			require.Equal(t, tc.want, got.LastFailure.Reason)
			require.LessOrEqual(t, len(got.LastFailure.Reason), fleet.MaxReasonLen)
			require.True(t, utf8.ValidString(got.LastFailure.Reason))
			require.Equal(t, got, e.job(cl.Job.ID))
			runs, err := e.c.Runs(e.ctx, prod, cl.Job.ID)
			require.NoError(t, err)
			require.Len(t, runs, 1)
			require.Equal(t, tc.want, runs[0].Reason)
			evs := e.events(cl.Job.ID)
			require.Equal(t, tc.want, evs[len(evs)-1].Message)
		})
	}
}

// TestFailRateLimited: a run that ends on its provider's rate limit spends
// no attempt and waits no backoff (even on a job's last attempt, where any
// other retryable failure dead-letters it); the factory that reported the
// cooldown in its heartbeat is not given the job again while it cools, and
// another factory takes it at once. What the engine said of the run
// (session, turns, model, exit) is kept on the ended run.
func TestFailRateLimited(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	tok := e.factory("f1")
	e.factory("f2")
	j := e.submit("maxAttempts: 1")
	cl := e.claim("f1")

	until := t0.Add(time.Minute)
	_, err := e.c.Heartbeat(e.ctx, tok, catalog.Heartbeat{Capabilities: baseCaps, Repos: []string{repo},
		Cooldowns: map[string]time.Time{"engine:claude": until}})
	require.NoError(t, err)
	facts := fleet.EngineFacts{Session: "0b7a1c52-sess", Turns: 3, Model: "claude-sonnet-4-5", LastActivityAt: t0,
		Exit: &fleet.RunExit{Code: 1, Reason: fleet.ExitExited}}
	got, err := e.c.Fail(e.ctx, "f1", prod, j.ID, coord.FailRequest{LeaseEpoch: cl.LeaseEpoch, Reason: "rate_limited: 429",
		Retryable: true, Kind: fleet.FailRateLimited, Engine: facts})
	require.NoError(t, err)
	require.Equal(t, fleet.StageQueued, got.Stage, "not dead-lettered on its one attempt")
	require.Equal(t, 0, got.Attempts, "a rate limit spends no attempt")
	require.False(t, got.NotBefore.After(t0), "and waits no backoff")
	require.Equal(t, fleet.FailRateLimited, got.LastFailure.Kind)
	runs, err := e.c.Runs(e.ctx, prod, j.ID)
	require.NoError(t, err)
	require.Len(t, runs, 1)
	require.Equal(t, facts, runs[0].EngineFacts)

	none, err := e.c.Claim(e.ctx, e.as("f1"))
	require.NoError(t, err)
	require.Nil(t, none, "f1 cools down for engine:claude")
	ex, err := e.c.Explain(e.ctx, catalog.Scope{}, prod, j.ID)
	require.NoError(t, err)
	require.Equal(t, "f2", ex.Schedule.Best, "another account's factory is the one to send it to")
	for _, c := range ex.Schedule.Candidates {
		if c.FactoryID == "f1" {
			require.False(t, c.Eligible)
			require.Equal(t, "cooling down for engine:claude until 2026-05-31T12:01:00Z (rate limited)", c.Reason)
		}
	}

	e.clock.Advance(time.Minute)
	again, err := e.c.Claim(e.ctx, e.as("f1"))
	require.NoError(t, err)
	require.NotNil(t, again, "the cooldown is over at its until")
	require.Equal(t, j.ID, again.Job.ID)
}

// TestFailCarriesCooldowns: a failure's cooldowns are added to the failing
// factory's before the job is given back, so a factory that never
// heartbeats (an elastic pool's execution) still keeps the job from coming
// straight back to its rate-limited account. Bad cooldowns refuse the whole
// report, naming the field, and change nothing.
func TestFailCarriesCooldowns(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	tok := e.factory("f1")
	e.factory("f2")
	_, err := e.c.Heartbeat(e.ctx, tok, catalog.Heartbeat{Capabilities: baseCaps, Repos: []string{repo},
		Cooldowns: map[string]time.Time{"engine:codex": t0.Add(time.Hour)}})
	require.NoError(t, err)
	j := e.submit("maxAttempts: 1")
	cl := e.claim("f1")

	fail := func(cs map[string]time.Time) (*fleet.Job, error) {
		return e.c.Fail(e.ctx, "f1", prod, j.ID, coord.FailRequest{LeaseEpoch: cl.LeaseEpoch, Reason: "rate_limited: 429",
			Retryable: true, Kind: fleet.FailRateLimited, Cooldowns: cs})
	}
	_, err = fail(map[string]time.Time{"gpu:a100": t0.Add(time.Minute)})
	var fe *fleet.Error
	require.ErrorAs(t, err, &fe)
	require.Equal(t, "cooldowns.gpu:a100", fe.Field)
	still, err := e.c.GetJob(e.ctx, prod, j.ID)
	require.NoError(t, err)
	require.Equal(t, cl.LeaseEpoch, still.LeaseEpoch, "a refused report moves nothing")
	require.Equal(t, "f1", still.HolderFactoryID)

	got, err := fail(map[string]time.Time{"engine:claude": t0.Add(time.Minute)})
	require.NoError(t, err)
	require.Equal(t, fleet.StageQueued, got.Stage)
	f, err := e.c.GetFactory(e.ctx, "f1")
	require.NoError(t, err)
	require.Equal(t, map[string]time.Time{"engine:claude": t0.Add(time.Minute), "engine:codex": t0.Add(time.Hour)}, f.Cooldowns,
		"added to the heartbeat's, not replacing them")
	none, err := e.c.Claim(e.ctx, e.as("f1"))
	require.NoError(t, err)
	require.Nil(t, none, "f1 cools down for engine:claude")
	ex, err := e.c.Explain(e.ctx, catalog.Scope{}, prod, j.ID)
	require.NoError(t, err)
	require.Equal(t, "f2", ex.Schedule.Best)
}

// TestHeartbeatCooldowns: a heartbeat's cooldowns replace the stored set,
// dropping the ones already over; a key that is not an engine capability,
// or an until too far ahead, is refused naming the field.
func TestHeartbeatCooldowns(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	tok := e.factory("f1")
	hb := func(cs map[string]time.Time) (*fleet.Factory, error) {
		return e.c.Heartbeat(e.ctx, tok, catalog.Heartbeat{Capabilities: baseCaps, Repos: []string{repo}, Cooldowns: cs})
	}
	f, err := hb(map[string]time.Time{"engine:claude": t0.Add(time.Minute), "engine:codex": t0})
	require.NoError(t, err)
	require.Equal(t, map[string]time.Time{"engine:claude": t0.Add(time.Minute)}, f.Cooldowns)
	f, err = hb(nil)
	require.NoError(t, err)
	require.Nil(t, f.Cooldowns, "the set is replaced")

	for _, tc := range []struct {
		cs    map[string]time.Time
		field string
	}{
		{map[string]time.Time{"gpu:a100": t0.Add(time.Minute)}, "cooldowns.gpu:a100"},
		{map[string]time.Time{"engine:": t0.Add(time.Minute)}, "cooldowns.engine:"},
		{map[string]time.Time{"engine:claude": t0.Add(25 * time.Hour)}, "cooldowns.engine:claude"},
	} {
		_, err := hb(tc.cs)
		var fe *fleet.Error
		require.ErrorAs(t, err, &fe)
		require.Equal(t, fleet.CodeInvalid, fe.Code)
		require.Equal(t, tc.field, fe.Field)
	}
}
