package fleet_test

import (
	"encoding/json"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gigafactory/fleet/shared/fleet"
)

func TestCheckFence(t *testing.T) {
	t.Parallel()
	held := func(stage fleet.Stage) fleet.Job {
		return fleet.Job{ID: "j1", Stage: stage, HolderFactoryID: "f1", LeaseEpoch: 5, LeaseExpiresAt: t0.Add(time.Minute)}
	}
	tests := []struct {
		name      string
		job       fleet.Job
		factoryID string
		epoch     int64
		wantMsg   string // "" means allowed
	}{
		{"holder at its epoch, assigned", held(fleet.StageAssigned), "f1", 5, ""},
		{"holder at its epoch, building", held(fleet.StageBuilding), "f1", 5, ""},
		{"queued job, no lease", fleet.Job{ID: "j1", Stage: fleet.StageQueued, LeaseEpoch: 5}, "f1", 5, "holds no lease"},
		{"released after delivery", fleet.Job{ID: "j1", Stage: fleet.StageReview, LeaseEpoch: 5}, "f1", 5, "holds no lease"},
		{"leased stage without a holder", fleet.Job{ID: "j1", Stage: fleet.StageBuilding, LeaseEpoch: 5}, "", 5, "holds no lease"},
		{"holder recorded on an unleased stage", held(fleet.StageTesting), "f1", 5, "holds no lease"},
		{"holder recorded on a terminal stage", held(fleet.StageShipped), "f1", 5, "holds no lease"},
		{"stale epoch", held(fleet.StageBuilding), "f1", 4, "stale"},
		{"epoch zero", held(fleet.StageBuilding), "f1", 0, "stale"},
		{"future epoch", held(fleet.StageBuilding), "f1", 6, "stale"},
		{"other holder, right epoch", held(fleet.StageBuilding), "f2", 5, "another factory"},
		{"other holder, stale epoch", held(fleet.StageBuilding), "f2", 4, "stale"},
		{"empty factory id", held(fleet.StageAssigned), "", 5, "another factory"},
		{"holder id differs in case", held(fleet.StageAssigned), "F1", 5, "another factory"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			before := tt.job
			err := tt.job.CheckFence(tt.factoryID, tt.epoch)
			require.Equal(t, before, tt.job, "CheckFence must not change the job")
			if tt.wantMsg == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, fleet.ErrFenced)
			require.NotErrorIs(t, err, fleet.ErrConflict)
			require.Equal(t, fleet.CodeFenced, fleet.CodeOf(err))
			var fe *fleet.Error
			require.ErrorAs(t, err, &fe)
			require.Contains(t, fe.Message, tt.wantMsg)
			require.Contains(t, fe.Message, "j1")
		})
	}
}

func TestLease(t *testing.T) {
	t.Parallel()
	exp := t0.Add(90 * time.Second)

	l, ok := (&fleet.Job{ID: "j1", Stage: fleet.StageQueued, LeaseEpoch: 3}).Lease()
	require.False(t, ok)
	require.Equal(t, fleet.Lease{}, l)

	j := &fleet.Job{ID: "j1", Stage: fleet.StageBuilding, HolderFactoryID: "f1", LeaseEpoch: 3, LeaseExpiresAt: exp}
	l, ok = j.Lease()
	require.True(t, ok)
	require.Equal(t, fleet.Lease{JobID: "j1", HolderFactoryID: "f1", LeaseEpoch: 3, ExpiresAt: exp}, l)

	b, err := json.Marshal(l)
	require.NoError(t, err)
	require.JSONEq(t, `{"jobId":"j1","holderFactoryId":"f1","leaseEpoch":3,"leaseExpiresAt":"2026-05-31T12:01:30Z"}`, string(b))
}

func TestLeaseExpired(t *testing.T) {
	t.Parallel()
	exp := t0.Add(time.Minute)
	tests := []struct {
		name   string
		holder string
		expiry time.Time
		now    time.Time
		want   bool
	}{
		{"well before", "f1", exp, t0, false},
		{"one nanosecond before", "f1", exp, exp.Add(-time.Nanosecond), false},
		{"exactly at expiry", "f1", exp, exp, true},
		{"one nanosecond after", "f1", exp, exp.Add(time.Nanosecond), true},
		{"long after", "f1", exp, exp.Add(24 * time.Hour), true},
		{"held with no expiry recorded", "f1", time.Time{}, t0, true},
		{"same instant in another zone", "f1", exp, exp.In(time.FixedZone("X", 3*3600)), true},
		{"no holder, past expiry", "", exp, exp.Add(time.Hour), false},
		{"no holder, no expiry", "", time.Time{}, t0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			j := &fleet.Job{ID: "j1", Stage: fleet.StageBuilding, HolderFactoryID: tt.holder, LeaseExpiresAt: tt.expiry}
			require.Equal(t, tt.want, j.LeaseExpired(tt.now))
		})
	}
}

func TestDurationJSON(t *testing.T) {
	t.Parallel()
	t.Run("round trip", func(t *testing.T) {
		t.Parallel()
		for _, tt := range []struct {
			d    time.Duration
			json string
		}{
			{0, `"0s"`},
			{time.Nanosecond, `"1ns"`},
			{45 * time.Minute, `"45m0s"`},
			{90 * time.Minute, `"1h30m0s"`},
			{1500 * time.Millisecond, `"1.5s"`},
			{-5 * time.Second, `"-5s"`},
			{math.MaxInt64, `"2562047h47m16.854775807s"`},
		} {
			b, err := json.Marshal(fleet.Duration(tt.d))
			require.NoError(t, err)
			require.Equal(t, tt.json, string(b))
			var back fleet.Duration
			require.NoError(t, json.Unmarshal(b, &back))
			require.Equal(t, fleet.Duration(tt.d), back)
		}
	})
	t.Run("reads what people write", func(t *testing.T) {
		t.Parallel()
		for in, want := range map[string]time.Duration{
			`"45m"`: 45 * time.Minute, `"2h"`: 2 * time.Hour, `"1h30m"`: 90 * time.Minute,
			`"300ms"`: 300 * time.Millisecond, `"0"`: 0, `"1.5h"`: 90 * time.Minute,
		} {
			var d fleet.Duration
			require.NoError(t, json.Unmarshal([]byte(in), &d), in)
			require.Equal(t, fleet.Duration(want), d, in)
		}
	})
	t.Run("bad input", func(t *testing.T) {
		t.Parallel()
		for _, in := range []string{`45`, `2700000000000`, `"45"`, `"soon"`, `""`, `"45 m"`, `"1d"`, `true`, `{}`, `["45m"]`, `"9999999999h"`} {
			d := fleet.Duration(time.Minute)
			require.Error(t, json.Unmarshal([]byte(in), &d), in)
			require.Equal(t, fleet.Duration(time.Minute), d, "%s: a failed read leaves the value alone", in)
		}
	})
	t.Run("in a budget", func(t *testing.T) {
		t.Parallel()
		b, err := json.Marshal(fleet.Budget{Wall: fleet.Duration(45 * time.Minute), USD: 5})
		require.NoError(t, err)
		require.JSONEq(t, `{"wall":"45m0s","usd":5}`, string(b))
		b, err = json.Marshal(fleet.Budget{})
		require.NoError(t, err)
		require.JSONEq(t, `{}`, string(b), "a zero budget writes no fields")
		var got fleet.Budget
		require.NoError(t, json.Unmarshal([]byte(`{"wall":"2h","usd":0.5}`), &got))
		require.Equal(t, fleet.Budget{Wall: fleet.Duration(2 * time.Hour), USD: 0.5}, got)
		require.Error(t, json.Unmarshal([]byte(`{"wall":7200}`), &got))
	})
}

func TestParsePriority(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   string
		want fleet.Priority
		ok   bool
	}{
		{"", fleet.PriorityNormal, true},
		{"low", fleet.PriorityLow, true},
		{"normal", fleet.PriorityNormal, true},
		{"high", fleet.PriorityHigh, true},
		{"critical", fleet.PriorityCritical, true},
		{"Low", "", false},
		{"HIGH", "", false},
		{" high", "", false},
		{"high ", "", false},
		{"urgent", "", false},
		{"medium", "", false},
		{"1", "", false},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%q", tt.in), func(t *testing.T) {
			t.Parallel()
			got, err := fleet.ParsePriority("job.priority", tt.in)
			if tt.ok {
				require.NoError(t, err)
				require.Equal(t, tt.want, got)
				return
			}
			var fe *fleet.Error
			require.ErrorAs(t, err, &fe)
			require.Equal(t, fleet.CodeInvalid, fe.Code)
			require.Equal(t, "job.priority", fe.Field)
			require.Empty(t, got)
		})
	}
}

func TestPriorityRank(t *testing.T) {
	t.Parallel()
	order := []fleet.Priority{fleet.PriorityLow, fleet.PriorityNormal, fleet.PriorityHigh, fleet.PriorityCritical}
	for i, p := range order {
		require.Equal(t, i, p.Rank(), "%s", p)
	}
	for i := 1; i < len(order); i++ {
		require.Greater(t, order[i].Rank(), order[i-1].Rank())
	}
	for _, p := range []fleet.Priority{"", "urgent", "LOW"} {
		require.Equal(t, fleet.PriorityNormal.Rank(), p.Rank(), "unknown %q ranks as normal", p)
	}
}

// fullJob has every field set to something other than its zero value.
func fullJob() fleet.Job {
	return fleet.Job{
		ID: "j1", ProductID: "p1", Title: "Fix the login redirect", Repo: "learning_ai_notes",
		Capabilities: []string{"os:linux", "engine:claude"}, Persona: "backend",
		Priority: fleet.PriorityHigh, Stage: fleet.StageBuilding, Body: "Do it.\r\n\n  ",
		LeaseEpoch: 3, HolderFactoryID: "f1", LeaseExpiresAt: t0.Add(time.Minute),
		DispatchEpoch: 2, TargetFactoryID: "f1",
		Dispatch:   fleet.Dispatch{Unroutable: "none yet", DeadLettered: 1},
		Checkpoint: "aq/wip/j1", Attempts: 1, MaxAttempts: 3, NotBefore: t0.Add(-time.Minute),
		LastFailure: &fleet.Failure{Reason: "oom", Retryable: true, FactoryID: "f0", At: t0.Add(-2 * time.Minute)},
		ParentID:    "j0", Deps: []string{"j0", "j00"}, DepsMode: fleet.DepsAny,
		Budget: fleet.Budget{Wall: fleet.Duration(45 * time.Minute), USD: 5},
		Review: &fleet.Review{Reviewers: []string{"ann", "bob"}, Quorum: 2,
			Votes: []fleet.Vote{{Reviewer: "ann", Approve: true, Comment: "lgtm", At: t0}}},
		IdempotencyKey: "tracker-4711", QueuedAt: t0.Add(-time.Hour), EventSeq: 9,
		CreatedAt: t0.Add(-2 * time.Hour), UpdatedAt: t0,
	}
}

func TestJobJSON(t *testing.T) {
	t.Parallel()
	t.Run("round trip", func(t *testing.T) {
		t.Parallel()
		j := fullJob()
		j.Rev = "etag-1"
		b, err := json.Marshal(j)
		require.NoError(t, err)
		var back fleet.Job
		require.NoError(t, json.Unmarshal(b, &back))
		require.Empty(t, back.Rev, "Rev is the store's, never the document's")
		j.Rev = ""
		require.Equal(t, j, back)

		var doc map[string]any
		require.NoError(t, json.Unmarshal(b, &doc))
		require.NotContains(t, doc, "rev")
		require.NotContains(t, doc, "Rev")
		require.NotContains(t, string(b), "etag-1")
		// The fields API.md says clients rely on, by their camelCase names.
		for _, k := range []string{"id", "productId", "title", "repo", "capabilities", "priority",
			"stage", "leaseEpoch", "dispatchEpoch", "targetFactoryId", "holderFactoryId", "checkpoint",
			"attempts", "parentId", "deps", "idempotencyKey", "createdAt", "updatedAt"} {
			require.Contains(t, doc, k)
		}
		require.Equal(t, "45m0s", doc["budget"].(map[string]any)["wall"])
		require.Equal(t, "2026-05-31T11:00:00Z", doc["queuedAt"])
		require.Equal(t, "Do it.\r\n\n  ", doc["body"], "the body survives byte for byte")
	})
	t.Run("zero times omitted", func(t *testing.T) {
		t.Parallel()
		j := fleet.Job{ID: "j2", ProductID: "p1", Stage: fleet.StageQueued, Deps: []string{},
			Capabilities: []string{}, CreatedAt: t0, UpdatedAt: t0, Rev: "r"}
		b, err := json.Marshal(j)
		require.NoError(t, err)
		var doc map[string]any
		require.NoError(t, json.Unmarshal(b, &doc))
		for _, k := range []string{"leaseExpiresAt", "notBefore", "queuedAt", "lastFailure", "review",
			"holderFactoryId", "checkpoint", "parentId", "idempotencyKey", "persona", "rev"} {
			require.NotContains(t, doc, k)
		}
		require.NotContains(t, doc["dispatch"], "at")
		require.NotContains(t, string(b), "0001-01-01", "no zero time is written anywhere")
		require.Equal(t, []any{}, doc["deps"])
		require.Equal(t, []any{}, doc["capabilities"])
		var back fleet.Job
		require.NoError(t, json.Unmarshal(b, &back))
		j.Rev = ""
		require.Equal(t, j, back)
	})
}

func TestRunAndEventIDs(t *testing.T) {
	t.Parallel()
	require.Equal(t, "j1:3", fleet.RunID("j1", 3))
	require.NotEqual(t, fleet.RunID("j1", 1), fleet.RunID("j1", 2), "one run per lease epoch")
	require.Equal(t, "j1:000000000007", fleet.EventID("j1", 7))
	// Store queries return a partition in id order, so event ids must sort
	// as their sequence numbers do.
	seqs := []int64{0, 1, 2, 9, 10, 11, 99, 100, 1000, 123456, 999999999999}
	for i := 1; i < len(seqs); i++ {
		require.Less(t, fleet.EventID("j1", seqs[i-1]), fleet.EventID("j1", seqs[i]))
	}
}

// The claim reads the queue one priority at a time in this order, so it
// must be the ranking's: every priority, strictly highest first.
func TestPrioritiesHighestFirst(t *testing.T) {
	t.Parallel()
	ps := fleet.PrioritiesHighestFirst()
	for i, p := range ps {
		got, err := fleet.ParsePriority("priority", string(p))
		require.NoError(t, err)
		require.Equal(t, p, got)
		if i > 0 {
			require.Greater(t, ps[i-1].Rank(), p.Rank())
		}
	}
	require.Len(t, ps, 4)
}
