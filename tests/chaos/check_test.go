package main

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// Histories are built from these: seq is filled in order.
func ev(typ, from, to, actor, actorID string) event {
	return event{Type: typ, From: from, To: to, Actor: actor, ActorID: actorID}
}

func seqd(evs ...event) []event {
	for i := range evs {
		evs[i].Seq = int64(i + 1)
	}
	return evs
}

var (
	submitted = ev("submitted", "", "queued", "operator", "admin")
	claimF1   = ev("claimed", "queued", "assigned", "factory", "f1")
	buildF1   = ev("stage", "assigned", "building", "factory", "f1")
	shipF1    = ev("stage", "building", "shipped", "factory", "f1")
	expired   = ev("lease_expired", "building", "queued", "system", "reaper")
	claimF2   = ev("claimed", "queued", "assigned", "factory", "f2")
	buildF2   = ev("stage", "assigned", "building", "factory", "f2")
	shipF2    = ev("stage", "building", "shipped", "factory", "f2")
)

func epochIs(n int64) func(string) (int64, error) {
	return func(string) (int64, error) { return n, nil }
}

func TestCheckJob(t *testing.T) {
	t.Parallel()
	shipped := jobView{ID: "j1", Stage: "shipped"}
	run1 := run{FactoryID: "f1", LeaseEpoch: 1, Result: "succeeded"}
	lost1 := run{FactoryID: "f1", LeaseEpoch: 1, Result: "lost"}
	run2 := run{FactoryID: "f2", LeaseEpoch: 2, Result: "succeeded"}
	for _, tc := range []struct {
		name     string
		evs      []event
		runs     []run
		shipped  func(string) (int64, error)
		want     jobResult
		contains string // in the one finding expected
		eventSeq int64  // the job's eventSeq (0: unchecked)
	}{
		{name: "a clean history has no findings", evs: seqd(submitted, claimF1, buildF1, shipF1),
			runs: []run{run1}, shipped: epochIs(1)},
		{name: "a reassignment after the lease expired is clean",
			evs:  seqd(submitted, claimF1, buildF1, expired, claimF2, buildF2, shipF2),
			runs: []run{lost1, run2}, shipped: epochIs(2)},
		{name: "a claim while another factory holds the job is a double assignment",
			evs:  seqd(submitted, claimF1, buildF1, ev("claimed", "building", "assigned", "factory", "f2")),
			want: jobResult{double: []string{"j1 seq 4: claimed by f2 while f1 held it"}}, contains: "not a transition"},
		{name: "a holder's move by a factory that does not hold it is a double assignment",
			evs:  seqd(submitted, claimF1, ev("stage", "assigned", "building", "factory", "f2")),
			want: jobResult{double: []string{"j1 seq 3: f2 moved it assigned -> building while f1 held it"}}},
		{name: "two runs at one lease epoch are a double assignment", evs: seqd(submitted, claimF1),
			runs: []run{run1, {FactoryID: "f2", LeaseEpoch: 1}},
			want: jobResult{double: []string{"j1: two runs at epoch 1 (f1, f2)"}}},
		{name: "a ship of the result an earlier holder's engine pushed is stale",
			evs:  seqd(submitted, claimF1, buildF1, expired, claimF2, buildF2, shipF2),
			runs: []run{{FactoryID: "f1", LeaseEpoch: 1, Result: "lost"}, run2}, shipped: epochIs(1),
			want: jobResult{stale: []string{"j1: shipped the result of epoch 1 (f1), delivered by f2"}}},
		{name: "a ship from a run whose lease was revoked is stale",
			evs:  seqd(submitted, claimF1, buildF1, shipF1),
			runs: []run{lost1}, shipped: epochIs(1),
			want: jobResult{stale: []string{"j1: shipped the result of epoch 1 (f1), whose lease was revoked"}}},
		{name: "a ship with no result on the origin is stale", evs: seqd(submitted, claimF1, buildF1, shipF1),
			runs: []run{run1}, shipped: func(string) (int64, error) { return 0, errors.New("no branch") },
			want: jobResult{stale: []string{"j1: shipped, but the origin has no aq/job/j1 with its result: no branch"}}},
		{name: "a ship whose run record is missing is unverified, not stale", evs: seqd(submitted, claimF1, buildF1, shipF1),
			shipped: epochIs(1), want: jobResult{unverified: 1}},
		{name: "a move not in the stage machine is illegal",
			evs:  seqd(submitted, claimF1, ev("stage", "assigned", "shipped", "factory", "f1")),
			runs: []run{run1}, shipped: epochIs(1),
			want: jobResult{illegal: []string{"j1 seq 3: assigned -> shipped by factory (stage): not a transition"}}},
		{name: "a move that does not start where the last one ended is illegal",
			evs:  seqd(submitted, ev("stage", "building", "shipped", "factory", "f1")),
			runs: []run{run1}, shipped: epochIs(1),
			want: jobResult{illegal: []string{"j1 seq 2: building -> shipped by factory, but the job was in queued"}}},
		{name: "a gap is a failure, and the path is not judged across it",
			evs:  []event{{Seq: 1, Type: "submitted", To: "queued", Actor: "operator"}, func() event { e := buildF1; e.Seq = 3; return e }(), func() event { e := shipF1; e.Seq = 4; return e }()},
			runs: []run{run1}, shipped: epochIs(1), want: jobResult{gaps: []string{"j1: events 2 to 2 missing"}}},
		{name: "fewer events than the job's eventSeq is a gap", evs: seqd(submitted, claimF1, buildF1, shipF1), eventSeq: 5,
			runs: []run{run1}, shipped: epochIs(1), want: jobResult{gaps: []string{"j1: events 5 to 5 missing (the job is at 5)"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			sh := tc.shipped
			if sh == nil {
				sh = epochIs(0)
			}
			j := shipped
			j.EventSeq = tc.eventSeq
			if tc.evs[len(tc.evs)-1].To != "shipped" {
				j.Stage = tc.evs[len(tc.evs)-1].To
			}
			got := checkJob(j, tc.evs, tc.runs, sh)
			if tc.contains != "" {
				require.Len(t, got.illegal, 1)
				require.Contains(t, got.illegal[0], tc.contains)
				got.illegal = nil
			}
			require.Equal(t, tc.want, got)
		})
	}
}

func TestLostJobs(t *testing.T) {
	t.Parallel()
	byID := map[string]jobView{
		"shipped": {ID: "shipped", Stage: "shipped"},
		"dead":    {ID: "dead", Stage: "dead_letter"},
		"held":    {ID: "held", Stage: "queued", Title: "chaos-1 ok 100 0.50"},
		"stuck":   {ID: "stuck", Stage: "building", Title: "chaos-2 ok 100"},
		"queued":  {ID: "queued", Stage: "queued", Title: "chaos-3 ok 100"},
	}
	held := map[string]string{"held": "ceiling: product chaos-budget budget: ..."}
	got := lostJobs([]string{"shipped", "dead", "held", "stuck", "queued", "gone"}, byID, held, 0)
	require.Equal(t, []string{
		"stuck: building at the deadline (chaos-2 ok 100)",
		"queued: queued at the deadline (chaos-3 ok 100)",
		"gone: submitted (201) but not listed",
	}, got)

	// Held behind a reservation no run will settle (everything else has
	// ended): the hold names a reason that is not true, so the job is lost.
	byID["held"] = jobView{ID: "held", ProductID: budgetProduct, Stage: "queued", Title: "chaos-1 ok 100 0.50"}
	got = lostJobs([]string{"shipped", "held"}, byID, held, 0.26)
	require.Equal(t, []string{"held: queued at the deadline (chaos-1 ok 100 0.50), held behind 0.260000 USD reserved for no run"}, got)
}

func TestCheckBudget(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		ledger    budgetView
		runs      []runSpend
		overspend string
		spent     float64
	}{
		{name: "spend up to the ceiling is within it",
			ledger: budgetView{CeilingUSD: 2, SpentUSD: 2},
			runs:   []runSpend{{Estimate: 1, USD: 1}, {Estimate: 1, USD: 0.6}, {Estimate: 0.4, USD: 0.4}}, spent: 2},
		{name: "a run past its own estimate may take spend past the ceiling by that much",
			ledger: budgetView{CeilingUSD: 2, SpentUSD: 2.5},
			runs:   []runSpend{{Estimate: 1, USD: 1.5}, {Estimate: 1, USD: 1}}, spent: 2.5},
		{name: "spend past the ceiling that no run's overrun explains is overspend",
			ledger: budgetView{CeilingUSD: 2, SpentUSD: 2.75},
			runs:   []runSpend{{Estimate: 1, USD: 1.25}, {Estimate: 1, USD: 1}, {Estimate: 0.5, USD: 0.5}}, spent: 2.75,
			overspend: "spent 2.750000 USD (ledger 2.750000, runs 2.750000) > ceiling 2.000000 + runs' usage past their estimates 0.250000, by 0.500000"},
		{name: "runs' spend the ledger never settled is overspend all the same",
			ledger: budgetView{CeilingUSD: 2, SpentUSD: 1},
			runs:   []runSpend{{Estimate: 1, USD: 1}, {Estimate: 1, USD: 1}, {Estimate: 1, USD: 1}}, spent: 3,
			overspend: "spent 3.000000 USD (ledger 1.000000, runs 3.000000) > ceiling 2.000000 + runs' usage past their estimates 0.000000, by 1.000000"},
		{name: "a ledger that counts more than the runs recorded (a run record lost) is judged by the ledger",
			ledger: budgetView{CeilingUSD: 2, SpentUSD: 2.5},
			runs:   []runSpend{{Estimate: 1, USD: 1}}, spent: 2.5,
			overspend: "spent 2.500000 USD (ledger 2.500000, runs 1.000000) > ceiling 2.000000 + runs' usage past their estimates 0.000000, by 0.500000"},
		{name: "a micro-dollar of float noise is not overspend",
			ledger: budgetView{CeilingUSD: 0.3, SpentUSD: 0.1 + 0.2},
			runs:   []runSpend{{Estimate: 0.1, USD: 0.1}, {Estimate: 0.2, USD: 0.2}}, spent: 0.3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := checkBudget(tc.ledger, tc.runs)
			require.InDelta(t, tc.spent, got.Spent, 1e-9)
			if tc.overspend == "" {
				require.Empty(t, got.Overspend)
				return
			}
			require.Equal(t, []string{tc.overspend}, got.Overspend)
		})
	}
}

func TestEngineRuns(t *testing.T) {
	t.Parallel()
	log := filepath.Join(t.TempDir(), "runs.log")
	require.NoError(t, os.WriteFile(log, []byte(
		"start j1 1 f1 100 0.50\n"+
			"start j1 2 f2 150 0.25\n"+ // f1's engine still running: an overlap
			"end j1 1 f1 200 0\n"+
			"end j1 2 f2 300 0\n"+
			"start j2 1 f1 400\n"+
			"end j2 1 f1 500 0\n"+
			"start j2 2 f2 500\n"+ // starts as the first ends: no overlap
			"start j3 1 f1 600\n", // killed: never ended
	), 0o644))
	runs, overlaps, usd, err := engineRuns(log)
	require.NoError(t, err)
	require.Equal(t, 5, runs)
	require.Equal(t, 1, overlaps)
	require.InDelta(t, 0.75, usd, 1e-9)
}
