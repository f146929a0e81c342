package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gigafactory/fleet/shared/api"
)

// Phase 7: live output. logRuns runs hold a lease each; an engine in each
// writes a line every logLineEvery, stamped with the time it was written;
// a shipper per run sends what is new every logShipEvery (the factory's
// pace: internal/logship) with POST /fleet/jobs/{id}/log; an SSE client per
// run follows GET /fleet/jobs/{id}/log/stream through the host emulator.
// Latency is from a line's stamp to the moment its client parsed it.
const (
	logProduct    = "bench-log"
	logRepo       = "log-r"
	logRuns       = 20
	logLineEvery  = 200 * time.Millisecond
	logShipEvery  = 500 * time.Millisecond
	logRunFor     = 10 * time.Second
	targetLogP99  = 1000.0
	logTargetName = "p99 live output latency"
)

// logResult is phase 7's figures.
type logResult struct {
	Runs  int     `json:"runs"`
	Lines int     `json:"lines"`
	P50Ms float64 `json:"p50Ms"`
	P90Ms float64 `json:"p90Ms"`
	P99Ms float64 `json:"p99Ms"`
	MaxMs float64 `json:"maxMs"`
}

func (s *session) runLiveLog(ctx context.Context) (*logResult, error) {
	if err := s.op.putProduct(ctx, logProduct, []string{logRepo}); err != nil {
		return nil, err
	}
	f, err := s.addFactory(ctx, "bench-log-f", logProduct, logRepo, logRuns, 2*logRuns+4)
	if err != nil {
		return nil, err
	}
	type held struct {
		id    string
		epoch int64
	}
	var runs []held
	for i := range logRuns {
		if _, err := s.op.submit(ctx, logProduct, manifest(fmt.Sprintf("talk %d", i), logRepo, jobCaps)); err != nil {
			return nil, err
		}
	}
	for deadline := time.Now().Add(30 * time.Second); len(runs) < logRuns; {
		c, err := f.api.fleet.Claim(ctx, api.ClaimRequest{})
		if err != nil {
			return nil, fmt.Errorf("claim: %w", err)
		}
		if c == nil {
			if time.Now().After(deadline) {
				return nil, fmt.Errorf("only %d of %d runs claimed", len(runs), logRuns)
			}
			time.Sleep(50 * time.Millisecond)
			continue
		}
		runs = append(runs, held{c.Job.ID, c.LeaseEpoch})
	}

	var (
		mu   sync.Mutex
		lat  []time.Duration
		errs []error
		wg   sync.WaitGroup
	)
	fail := func(err error) {
		mu.Lock()
		defer mu.Unlock()
		errs = append(errs, err)
	}
	for _, r := range runs {
		// The follower: every line it parses, against its stamp.
		followed := make(chan struct{})
		wg.Go(func() {
			defer close(followed)
			var partial string
			_, err := s.op.fleet.Stream(ctx, api.StreamRequest{Path: api.LogStreamPath(r.id, r.epoch), Product: logProduct}, func(ev api.Event) error {
				now := time.Now()
				if ev.Type == api.LogEventEnd {
					return errLogEnd
				}
				var text string
				if err := json.Unmarshal([]byte(ev.Data), &text); err != nil {
					return err
				}
				lines := strings.Split(partial+text, "\n")
				partial = lines[len(lines)-1]
				mu.Lock()
				defer mu.Unlock()
				for _, l := range lines[:len(lines)-1] {
					if ns, err := strconv.ParseInt(strings.TrimPrefix(l, "line "), 10, 64); err == nil {
						lat = append(lat, now.Sub(time.Unix(0, ns)))
					}
				}
				return nil
			})
			if err != nil && !errors.Is(err, errLogEnd) {
				fail(fmt.Errorf("log stream of %s: %w", r.id, err))
			}
		})
		// The engine and its shipper.
		wg.Go(func() {
			var log strings.Builder
			sent := 0
			write, ship := time.NewTicker(logLineEvery), time.NewTicker(logShipEvery)
			defer write.Stop()
			defer ship.Stop()
			send := func() {
				if log.Len() == sent {
					return
				}
				chunk := log.String()[sent:]
				if _, err := f.api.fleet.AppendLog(ctx, logProduct, r.id, r.epoch, int64(sent), []byte(chunk)); err != nil {
					fail(fmt.Errorf("append to %s: %w", r.id, err))
					return
				}
				sent += len(chunk)
			}
			for end := time.After(logRunFor); ; {
				select {
				case <-ctx.Done():
					return
				case <-write.C:
					fmt.Fprintf(&log, "line %d\n", time.Now().UnixNano())
				case <-ship.C:
					send()
				case <-end:
					send()
					_, err := f.api.fleet.Fail(ctx, api.FailRequest{JobID: r.id, ProductID: logProduct, LeaseEpoch: api.Ptr(r.epoch),
						Reason: api.Ptr("bench: the run is over"), Retryable: api.Ptr(false)})
					if err != nil {
						fail(fmt.Errorf("end %s: %w", r.id, err))
					}
					<-followed
					return
				}
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if len(lat) == 0 {
		return nil, errors.New("no line reached a follower")
	}
	res := &logResult{Runs: len(runs), Lines: len(lat)}
	res.P50Ms, res.P90Ms, res.P99Ms, res.MaxMs = ms(percentile(lat, 50)), ms(percentile(lat, 90)), ms(percentile(lat, 99)), ms(percentile(lat, 100))
	return res, nil
}

var errLogEnd = errors.New("the log ended")
