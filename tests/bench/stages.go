package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"text/tabwriter"
	"time"

	"github.com/gigafactory/fleet/local/hostemu"
	"github.com/gigafactory/fleet/shared/api"
)

// stageResult is one stage of the dispatch path in phase 1: how many jobs
// it timed and its p50 and p99.
type stageResult struct {
	Stage string  `json:"stage"`
	Where string  `json:"measuredIn"`
	N     int64   `json:"samples"`
	P50Ms float64 `json:"p50Ms"`
	P99Ms float64 `json:"p99Ms"`
}

// coordinatorStats reads the coordinator's counters, the dispatch stages
// among them.
func (c *client) coordinatorStats(ctx context.Context) (api.CoordinatorStats, error) {
	var m struct {
		Coord *api.CoordinatorStats `json:"coordinator"`
	}
	if _, err := c.fleet.JSON(ctx, api.Request{Method: http.MethodGet, Path: "/metrics"}, &m); err != nil {
		return api.CoordinatorStats{}, err
	}
	if m.Coord == nil {
		return api.CoordinatorStats{}, fmt.Errorf("/api/fleet/metrics has no coordinator section")
	}
	return *m.Coord, nil
}

// dispatchStages are phase 1's dispatch path by stage: the handler's own
// histograms (no other phase has dispatched when they are read, so they
// hold phase 1 alone, its warm-up jobs included) and the receive stage, timed here, from the broker
// storing the message to Receive returning it at the target factory.
//
// The emulator's timings of the dispatch trigger's batches (feed)
// are listed under the wake they make up: the page read and the
// invocation (which holds the schedule, stamp and publish of the batch's
// jobs), per batch; and the checkpoint write, at most one every
// hostemu.CheckpointEvery, which a read waits for when it falls due after
// a batch.
func dispatchStages(s api.CoordinatorStats, feed hostemu.FeedStatus, receive []time.Duration) []stageResult {
	const handler, emulator = "handler", "emulator, per batch"
	recv := stageResult{Stage: "receive (broker stored -> factory's Receive returned)", Where: "bench", N: int64(len(receive))}
	recv.P50Ms, recv.P99Ms = ms(percentile(receive, 50)), ms(percentile(receive, 99))
	return []stageResult{
		{"submit write (the job's create)", handler, s.StageSubmitN, s.StageSubmitP50Ms, s.StageSubmitP99Ms},
		{"change-feed wake (created -> dispatch starts; has the write)", handler, s.StageWakeN, s.StageWakeP50Ms, s.StageWakeP99Ms},
		{"  dispatch trigger: feed page read", emulator, feed.Batches, feed.ReadP50Ms, feed.ReadP99Ms},
		{"  dispatch trigger: invocation", emulator, feed.Batches, feed.InvokeP50Ms, feed.InvokeP99Ms},
		{fmt.Sprintf("  dispatch trigger: checkpoint write (at most every %s)", hostemu.CheckpointEvery), "emulator, per write", feed.Checkpoints, feed.CheckpointP50Ms, feed.CheckpointP99Ms},
		{"schedule (factory list, seat counts, admission, scorer)", handler, s.StageScheduleN, s.StageScheduleP50Ms, s.StageScheduleP99Ms},
		{"stamp (the job's CAS)", handler, s.StageStampN, s.StageStampP50Ms, s.StageStampP99Ms},
		{"publish (broker acknowledged)", handler, s.StagePublishN, s.StagePublishP50Ms, s.StagePublishP99Ms},
		recv,
	}
}

// printStages writes phase 1's stage table.
func printStages(out io.Writer, stages []stageResult) {
	fmt.Fprintf(out, "\nDispatch latency by stage (phase 1; the handler's and the emulator's stages count its warm-up jobs too and are histogram bucket bounds, at most 19%% above the true value)\n")
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "STAGE\tSAMPLES\tP50 ms\tP99 ms\tMEASURED IN")
	for _, st := range stages {
		fmt.Fprintf(tw, "%s\t%d\t%.2f\t%.2f\t%s\n", st.Stage, st.N, st.P50Ms, st.P99Ms, st.Where)
	}
	_ = tw.Flush()
}

// tailSegments is phase 1's slowest jobs beside its middle ones, each
// job's latency cut at the instants its own document and message carry:
// the job's createdAt (stamped as the handler creates it), its
// dispatch.at (stamped inside the dispatch CAS) and the broker's storing
// time. The stage histograms say how each stage is distributed; this says
// which stages the slow jobs were slow in.
type tailSegments struct {
	Jobs     int           `json:"jobsEach"`
	Segments []tailSegment `json:"segments"`
}

type tailSegment struct {
	Segment   string  `json:"segment"`
	MiddleMs  float64 `json:"middleMeanMs"`
	SlowestMs float64 `json:"slowestMeanMs"`
}

// tailJob is one phase-1 job's instants as the bench saw them.
type tailJob struct {
	id                     string
	sent, stored, received time.Time
	created, stamped       time.Time
}

// tailSegmentNames name the cuts of a job's latency, in order.
var tailSegmentNames = []string{
	"submit sent -> job created (the request reaching the handler)",
	"created -> stamped (its write, the change-feed wake, schedule, the stamp's CAS)",
	"stamped -> stored by the broker (the CAS's commit, the publish)",
	"stored -> received by the target factory",
}

func (j tailJob) segments() []time.Duration {
	return []time.Duration{j.created.Sub(j.sent), j.stamped.Sub(j.created), j.stored.Sub(j.stamped), j.received.Sub(j.stored)}
}

// cutTail reads the slowest 1% of jobs (at least one) and as many around
// the median, and returns their mean segments. jobs is sorted by latency.
func cutTail(ctx context.Context, read func(ctx context.Context, id string) (created, stamped time.Time, err error), jobs []tailJob) (*tailSegments, error) {
	n := max(1, len(jobs)/100)
	if len(jobs) < 2*n {
		return nil, nil
	}
	mid := len(jobs)/2 - n/2
	groups := [][]tailJob{slices.Clone(jobs[mid : mid+n]), slices.Clone(jobs[len(jobs)-n:])}
	means := make([][]time.Duration, len(groups))
	for g, group := range groups {
		sum := make([]time.Duration, len(tailSegmentNames))
		for i := range group {
			var err error
			if group[i].created, group[i].stamped, err = read(ctx, group[i].id); err != nil {
				return nil, err
			}
			for k, d := range group[i].segments() {
				sum[k] += d
			}
		}
		for k := range sum {
			sum[k] /= time.Duration(len(group))
		}
		means[g] = sum
	}
	out := &tailSegments{Jobs: n}
	for k, name := range tailSegmentNames {
		out.Segments = append(out.Segments, tailSegment{Segment: name, MiddleMs: ms(means[0][k]), SlowestMs: ms(means[1][k])})
	}
	return out, nil
}

// printTail writes the tail's table.
func printTail(out io.Writer, t *tailSegments) {
	fmt.Fprintf(out, "\nWhere the slowest jobs lost their time (phase 1: the slowest %d jobs beside the %d around the median, mean ms per segment)\n", t.Jobs, t.Jobs)
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "SEGMENT\tMIDDLE\tSLOWEST")
	for _, s := range t.Segments {
		fmt.Fprintf(tw, "%s\t%.2f\t%.2f\n", s.Segment, s.MiddleMs, s.SlowestMs)
	}
	_ = tw.Flush()
}
