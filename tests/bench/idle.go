package main

import (
	"context"
	"time"
)

// idleResult is phase 4: what the fleet costs the store while nothing
// happens but factories being connected.
type idleResult struct {
	Seconds   float64 `json:"seconds"`
	Factories int     `json:"factories"`
	// Heartbeats the factories sent in the window (each is a store write
	// by design: it records the factory's liveness).
	Heartbeats int64 `json:"heartbeats"`
	Ops        ops   `json:"ops"`
	// ReadOps is reads + queries + feed reads of both processes.
	ReadOps int64 `json:"readOps"`
	Writes  int64 `json:"writes"`
}

// runIdle is phase 4: the latency phase's four factories stay connected,
// heartbeating every 15s and blocked in Receive; nothing is submitted.
func (s *session) runIdle(ctx context.Context) (*idleResult, error) {
	heartbeats := func() (n int64) {
		for _, f := range s.factories {
			n += f.heartbeats.Load()
		}
		return n
	}
	if err := settle(ctx, s.op); err != nil {
		return nil, err
	}
	a, err := s.probe.take(ctx)
	if err != nil {
		return nil, err
	}
	hb0, start := heartbeats(), time.Now()
	window := time.NewTimer(s.cfg.Idle)
	defer window.Stop()
	select {
	case <-ctx.Done():
		return nil, context.Cause(ctx)
	case <-window.C:
	}
	b, err := s.probe.take(ctx)
	if err != nil {
		return nil, err
	}
	o, err := s.probe.between(a, b)
	if err != nil {
		return nil, err
	}
	t := o.Total()
	return &idleResult{
		Seconds: time.Since(start).Seconds(), Factories: len(s.factories), Heartbeats: heartbeats() - hb0,
		Ops: o, ReadOps: readOps(t), Writes: t.Writes,
	}, nil
}
