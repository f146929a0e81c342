package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/gigafactory/fleet/shared/bus"
	"github.com/gigafactory/fleet/shared/fleet"
	"github.com/gigafactory/fleet/shared/protocol"
	"github.com/gigafactory/fleet/shared/store/storecount"
)

const stepsProduct = "bench-steps"

// stepOps is one step's median operations over the runs.
type stepOps struct {
	Step     string            `json:"step"`
	Handler  storecount.Counts `json:"handler"`
	Emulator storecount.Counts `json:"emulator"`
}

// stepsResult is the per-step breakdown: single lifecycles run one step at a
// time, the counters read after each step once the change feed settled.
type stepsResult struct {
	Runs  int       `json:"runs"`
	Steps []stepOps `json:"steps"`
	Sum   ops       `json:"sumOfMedians"`
}

// The steps of one lifecycle. Submit and dispatch are one step: the change
// feed picks a job up within milliseconds of its write, before any probe
// could run between the two.
var stepNames = []string{"submit + dispatch", "accept", "complete (bus only)", "PATCH building", "PATCH shipped"}

// runSteps runs `runs` lifecycles step by step through one factory of its
// own, and returns the median operations of each step. One more lifecycle
// runs first, unmeasured: a product's first job also creates its queue-state
// document, a one-off.
func (s *session) runSteps(ctx context.Context, runs int) (*stepsResult, error) {
	const repo = "step-r0"
	if err := s.op.putProduct(ctx, stepsProduct, []string{repo}); err != nil {
		return nil, err
	}
	f, err := s.addFactory(ctx, "step-0", stepsProduct, repo, 64, 2)
	if err != nil {
		return nil, err
	}
	samples := make([][]ops, len(stepNames))
	for run := range runs + 1 {
		var d bus.Delivery
		var m protocol.DispatchMessage
		var epoch int64
		steps := []func() error{
			func() error {
				id, err := s.op.submit(ctx, stepsProduct, manifest(fmt.Sprintf("step %d", run), repo, jobCaps))
				if err != nil {
					return err
				}
				d, m, err = receiveDispatch(ctx, f, id)
				return err
			},
			func() (err error) {
				epoch, err = f.api.accept(ctx, m)
				return err
			},
			func() error { return f.bus.Complete(ctx, d) },
			func() error { return f.api.patchStage(ctx, stepsProduct, m.JobID, fleet.StageBuilding, epoch) },
			func() error { return f.api.patchStage(ctx, stepsProduct, m.JobID, fleet.StageShipped, epoch) },
		}
		if err := settle(ctx, s.op); err != nil {
			return nil, err
		}
		prev, err := s.probe.take(ctx)
		if err != nil {
			return nil, err
		}
		for i, step := range steps {
			if err := step(); err != nil {
				return nil, fmt.Errorf("run %d, %s: %w", run, stepNames[i], err)
			}
			if err := settle(ctx, s.op); err != nil {
				return nil, err
			}
			cur, err := s.probe.take(ctx)
			if err != nil {
				return nil, err
			}
			o, err := s.probe.between(prev, cur)
			if err != nil {
				return nil, err
			}
			if run > 0 {
				samples[i] = append(samples[i], o)
			}
			prev = cur
		}
	}
	res := &stepsResult{Runs: runs}
	for i, name := range stepNames {
		st := stepOps{Step: name, Handler: medianCounts(samples[i], func(o ops) storecount.Counts { return o.Handler }),
			Emulator: medianCounts(samples[i], func(o ops) storecount.Counts { return o.Emulator })}
		res.Steps = append(res.Steps, st)
		res.Sum.Handler, res.Sum.Emulator = add(res.Sum.Handler, st.Handler), add(res.Sum.Emulator, st.Emulator)
	}
	return res, nil
}

// receiveDispatch waits for the dispatch message of job id.
func receiveDispatch(ctx context.Context, f *factory, id string) (bus.Delivery, protocol.DispatchMessage, error) {
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		ds, err := f.bus.Receive(ctx, f.id, 1, time.Until(deadline))
		if err != nil {
			return bus.Delivery{}, protocol.DispatchMessage{}, err
		}
		for _, d := range ds {
			m, err := bus.DecodeDispatch(d)
			if err == nil && m.JobID == id {
				return d, m, nil
			}
			// A GC request, or a leftover: not this step's message.
			if err := f.bus.Complete(ctx, d); err != nil {
				return bus.Delivery{}, protocol.DispatchMessage{}, err
			}
		}
	}
	return bus.Delivery{}, protocol.DispatchMessage{}, errors.New("job lost: no dispatch message within 30s")
}

// medianCounts is the per-kind median of the samples.
func medianCounts(samples []ops, pick func(ops) storecount.Counts) storecount.Counts {
	med := func(get func(storecount.Counts) int64) int64 {
		vs := make([]int64, len(samples))
		for i, o := range samples {
			vs[i] = get(pick(o))
		}
		slices.Sort(vs)
		return vs[len(vs)/2]
	}
	return storecount.Counts{
		Reads:     med(func(c storecount.Counts) int64 { return c.Reads }),
		Writes:    med(func(c storecount.Counts) int64 { return c.Writes }),
		Queries:   med(func(c storecount.Counts) int64 { return c.Queries }),
		FeedReads: med(func(c storecount.Counts) int64 { return c.FeedReads }),
		Conflicts: med(func(c storecount.Counts) int64 { return c.Conflicts }),
	}
}
