// Package launcher runs an elastic factory pool on one machine the way KEDA
// runs a Container Apps Job: every polling interval it reads the depth of
// the pool's subscription and starts `factory --once` executions by the
// ScaledJob arithmetic (Starts), down to none when the subscription is
// empty. terraform/README.md ("Elastic pool scaling") has the arithmetic.
package launcher

import "fmt"

// Strategy is a KEDA ScaledJob scaling strategy.
type Strategy string

const (
	// Default starts min(⌈depth/m⌉, max) − running. It is what Container
	// Apps Jobs run (they cannot select another strategy), so it is the
	// local stack's too. It is exact when a message stays counted while
	// its execution works on it, which is why an elastic execution keeps
	// its dispatch locked until its run ends: depth = queued + running.
	Default Strategy = "default"
	// Accurate starts ⌈depth/m⌉ − pending (capped at max − running): for
	// queues whose depth no longer counts messages once an execution has
	// taken them (complete-on-claim). Container Apps cannot select it; it
	// stays here to compare the two.
	Accurate Strategy = "accurate"
)

// ParseStrategy reads a strategy name; empty means Default.
func ParseStrategy(s string) (Strategy, error) {
	switch Strategy(s) {
	case "", Default:
		return Default, nil
	case Accurate:
		return Accurate, nil
	}
	return "", fmt.Errorf("scaling strategy %q: want %q or %q", s, Default, Accurate)
}

// Load is what one polling tick sees.
type Load struct {
	// Depth is the subscription's active message count: waiting messages
	// and messages an execution has received but not yet completed.
	Depth int64
	// PerExecution is KEDA's messageCount: messages one execution takes.
	PerExecution int64
	// Running counts unfinished executions.
	Running int64
	// Pending counts unfinished executions that have not yet taken a
	// message (KEDA: a job whose pod is not running yet).
	Pending int64
	// Max is the most executions that may run at once (maxExecutions).
	Max int64
}

// Starts is how many executions to start now, as KEDA's ScaledJob executor
// computes it (pkg/scaling/executor/scale_jobs.go, minExecutions 0): the
// scaler asks for ⌈depth/m⌉ executions, at most Max, and the strategy
// deducts what already runs. Nothing starts while the depth is zero (the
// trigger is inactive) or when the deduction leaves nothing.
func Starts(s Strategy, l Load) int64 {
	if l.Depth <= 0 || l.Max <= 0 {
		return 0
	}
	per := max(l.PerExecution, 1)
	scaleTo := (l.Depth + per - 1) / per
	maxScale := min(scaleTo, l.Max)
	var room int64
	switch s {
	case Default:
		room = maxScale - l.Running
	default: // Accurate
		if maxScale+l.Running > l.Max {
			room = l.Max - l.Running
		} else {
			room = maxScale - l.Pending
		}
	}
	return max(0, min(scaleTo, room))
}
