package main

import (
	"context"
	"fmt"
	"net/http"
	"strings"

	"github.com/gigafactory/fleet/local/hostemu"
)

// timerFunctions are the app's timer functions, found as the host finds
// them, so a new timer is measured (and its idle ticks counted) without
// anyone remembering to list it here.
func timerFunctions(root string) ([]string, error) {
	app, err := hostemu.LoadApp(root)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, f := range app.Functions {
		if t, ok := f.Trigger(); ok && strings.EqualFold(t.Type, "timerTrigger") {
			names = append(names, f.Name)
		}
	}
	if len(names) == 0 {
		return nil, fmt.Errorf("no timer function under %s/functions", root)
	}
	return names, nil
}

// sweepRuns is how many ticks of each sweep are run; the first may still
// find work left by earlier phases (and records that it found none).
const sweepRuns = 5

// sweepResult is one timer function's store operations per tick.
type sweepResult struct {
	Function string `json:"function"`
	// First is the first tick after phase 1; Idle the cheapest of
	// the ticks after it (a heartbeat or a scheduled tick of another timer
	// landing inside a window only adds to it).
	First ops `json:"first"`
	Idle  ops `json:"idle"`
}

// runSweeps runs each timer function sweepRuns times through the host
// emulator's admin API (POST /admin/functions/{name}, which answers once the
// run is over) and reads both processes' counters around each run.
func (s *session) runSweeps(ctx context.Context, timers []string) ([]sweepResult, error) {
	var out []sweepResult
	for _, name := range timers {
		r := sweepResult{Function: name}
		for i := range sweepRuns {
			if err := settle(ctx, s.op); err != nil {
				return nil, err
			}
			a, err := s.probe.take(ctx)
			if err != nil {
				return nil, err
			}
			if err := s.op.admin(ctx, http.MethodPost, "/admin/functions/"+name, map[string]string{"input": ""}, nil); err != nil {
				return nil, fmt.Errorf("run %s: %w", name, err)
			}
			b, err := s.probe.take(ctx)
			if err != nil {
				return nil, err
			}
			o, err := s.probe.between(a, b)
			if err != nil {
				return nil, err
			}
			switch {
			case i == 0:
				r.First = o
			case i == 1 || o.Total().Total() < r.Idle.Total().Total():
				r.Idle = o
			}
		}
		out = append(out, r)
	}
	return out, nil
}
