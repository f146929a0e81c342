package agent

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gigafactory/fleet/infra/factory/internal/transport"
	"github.com/gigafactory/fleet/shared/api"
	"github.com/gigafactory/fleet/shared/clock/clocktest"
	"github.com/gigafactory/fleet/shared/fleet"
	"github.com/gigafactory/fleet/shared/protocol"
)

// stopEngine is a shell engine that writes some work, records its process
// group (its own pid: the engine leads its group), says it is up and then
// hangs with a child until it is stopped.
func stopEngine(started, pidFile string) string {
	return `sh -c 'echo wip > wip.txt; echo $$ > ` + pidFile + `; sleep 600 & echo up > ` + started + `; wait'`
}

func waitUp(t *testing.T, started string) {
	t.Helper()
	up, err := os.Open(started)
	require.NoError(t, err)
	_, _ = io.ReadAll(up)
	up.Close()
}

// liveGroup lists the processes of group pgid that are not zombies: a
// killed child whose new parent (here, pid 1) does not reap it stays a
// zombie, which signal 0 would still find though it runs nothing.
func liveGroup(t *testing.T, pgid int) []string {
	t.Helper()
	stats, err := filepath.Glob("/proc/[0-9]*/stat")
	require.NoError(t, err)
	var live []string
	for _, p := range stats {
		b, err := os.ReadFile(p)
		if err != nil {
			continue // exited meanwhile
		}
		// pid (comm) state ppid pgrp ...; comm may hold spaces.
		rest := string(b[strings.LastIndexByte(string(b), ')')+2:])
		f := strings.Fields(rest)
		if len(f) > 2 && f[2] == strconv.Itoa(pgid) && f[0] != "Z" {
			live = append(live, p)
		}
	}
	return live
}

func readPgid(t *testing.T, pidFile string) int {
	t.Helper()
	b, err := os.ReadFile(pidFile)
	require.NoError(t, err)
	pgid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	require.NoError(t, err)
	return pgid
}

// heldRun is job j1 running on an agent with the stop engine, under the
// lease of claim cl.
type heldRun struct {
	a    *Agent
	c    *fakeCoord
	repo gitRepo
	r    *jobRun
	cl   *protocol.Claimed
	pgid int // the engine's process group
}

// startHeldRun claims j1 on a fresh agent and returns once its engine is
// up. renew, if not zero, is the lease keeper's cadence; setup, if any,
// changes the agent before the claim.
func startHeldRun(t *testing.T, renew time.Duration, setup ...func(*Agent)) heldRun {
	t.Helper()
	root := t.TempDir()
	h := heldRun{repo: newGitRepo(t, root), c: newFakeCoord("j1", "app")}
	gates := t.TempDir()
	started, pidFile := fifo(t, gates, "started"), filepath.Join(gates, "pid")
	h.a = newGitAgent(t, root, h.repo, h.c, stopEngine(started, pidFile))
	if renew != 0 {
		h.a.cfg.Renew = renew
	}
	for _, f := range setup {
		f(h.a)
	}
	h.cl = h.c.claim()
	h.r = h.a.handle(context.Background(), transport.Delivery{ID: "claim:j1:1", Claimed: h.cl})
	require.NotNil(t, h.r)
	waitUp(t, started)
	h.pgid = readPgid(t, pidFile)
	return h
}

// TestStopRequests: a cancel or preempt command, from a control message or
// from a renewal answer, stops the engine's whole process group, pushes the
// work to aq/wip/<id> and acknowledges with the matching outcome naming
// that checkpoint.
func TestStopRequests(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		outcome fleet.ReleaseOutcome
		// The coordinator's request, in every renewal answer.
		cancel, preempt bool
		// message, if set, is the control message the coordinator sends
		// after setting the request; it is acted on once the renewal it
		// prompts confirms it. Without, the lease keeper hears of it.
		message protocol.ControlAction
	}{
		{"cancel by control message", fleet.ReleaseCancelled, true, false, protocol.ControlCancel},
		{"preempt by control message", fleet.ReleasePreempted, false, true, protocol.ControlPreempt},
		{"message and answer disagree: the answer wins", fleet.ReleasePreempted, false, true, protocol.ControlCancel},
		{"cancel by renewal answer", fleet.ReleaseCancelled, true, false, ""},
		{"preempt by renewal answer", fleet.ReleasePreempted, false, true, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var renew time.Duration
			if tt.message != "" {
				// Only the message may stop the run, not the lease keeper.
				renew = time.Hour
			}
			h := startHeldRun(t, renew)
			c := h.c
			c.mu.Lock()
			c.job.CancelRequested, c.job.PreemptRequested = tt.cancel, tt.preempt
			c.mu.Unlock()
			if tt.message != "" {
				h.a.handle(context.Background(), transport.Delivery{ID: "c", Control: &protocol.ControlMessage{
					Action: tt.message, JobID: "j1", ProductID: "p", TargetFactoryID: "f1", LeaseEpoch: h.cl.LeaseEpoch}})
			}
			require.Equal(t, OutcomeStopped, waitRun(t, h.r, "the stopped run"))

			require.Empty(t, liveGroup(t, h.pgid), "the engine's process group is gone")
			require.Equal(t, "wip", h.repo.show("aq/wip/j1", "wip.txt"), "the work so far was pushed")
			c.mu.Lock()
			defer c.mu.Unlock()
			wip := "aq/wip/j1"
			require.Equal(t, []api.ReleaseRequest{{LeaseEpoch: &h.cl.LeaseEpoch, Outcome: &tt.outcome, Checkpoint: &wip}}, c.acks)
			require.Empty(t, c.fails)
		})
	}
}

// TestStaleControlMessageIgnored: a command naming another lease of the job
// (an older one) or a job not running here stops nothing.
func TestStaleControlMessageIgnored(t *testing.T) {
	t.Parallel()
	h := startHeldRun(t, 0)
	a, c, r, cl := h.a, h.c, h.r, h.cl
	for _, msg := range []protocol.ControlMessage{
		{Action: protocol.ControlCancel, JobID: "j1", TargetFactoryID: "f1", LeaseEpoch: cl.LeaseEpoch - 1},
		{Action: protocol.ControlCancel, JobID: "j2", TargetFactoryID: "f1", LeaseEpoch: cl.LeaseEpoch},
	} {
		a.handle(context.Background(), transport.Delivery{ID: "c", Control: &msg})
	}
	select {
	case <-r.done:
		t.Fatal("a stale command stopped the run")
	default:
	}
	r.cancel(errShutdown)
	require.Equal(t, OutcomeInterrupted, waitRun(t, r, "the run"))
	c.mu.Lock()
	defer c.mu.Unlock()
	require.Empty(t, c.acks)
}

// TestControlMessageNeedsTheCoordinatorsWord: a control message alone
// stops nothing (whoever can publish on the subscription could have forged
// it): the factory renews at once and, the answer asking nothing, goes on.
// The lease keeper renews once an hour here, so every renewal is the
// message's, and each renews the run's own lease: the product a message
// names is not asked. (TestStopRequests: a confirmed one stops the run.)
func TestControlMessageNeedsTheCoordinatorsWord(t *testing.T) {
	t.Parallel()
	h := startHeldRun(t, time.Hour)
	a, c, r, cl := h.a, h.c, h.r, h.cl
	var renewals atomic.Int32
	c.mu.Lock()
	c.onRenew = func(int64) { renewals.Add(1) }
	c.mu.Unlock()

	for _, action := range []protocol.ControlAction{protocol.ControlCancel, protocol.ControlPreempt} {
		a.handle(context.Background(), transport.Delivery{ID: "c", Control: &protocol.ControlMessage{
			Action: action, JobID: "j1", ProductID: "forged", TargetFactoryID: "f1", LeaseEpoch: cl.LeaseEpoch}})
	}
	// The first cause wins: had a message stopped the run, this shutdown
	// would not be what ends it.
	checks := renewals.Load()
	r.cancel(errShutdown)
	require.Equal(t, OutcomeInterrupted, waitRun(t, r, "the run"), "a forged command stopped the run")
	require.EqualValues(t, 2, checks, "each message was checked with one renewal")
	c.mu.Lock()
	defer c.mu.Unlock()
	require.Equal(t, []string{"p", "p"}, c.renewedFor[:2], "the run's lease was renewed, under the claim's product")
	require.Empty(t, c.acks)
}

// TestHungCheckpointLeavesTheReleaseItsTime: a run stopped by a shutdown
// or a cancel checkpoints, then releases or acknowledges; a checkpoint
// push that hangs (origin does not answer) is given up once its own local
// step's time has passed on the factory's clock, and the release or the
// acknowledgement, which frees the lease, still goes out. Before, the
// checkpoint and the release shared one local step's time, and a hung
// push used it all: the job waited for its lease to expire (a shutdown)
// or for the coordinator to force the cancel.
func TestHungCheckpointLeavesTheReleaseItsTime(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		stop  func(h heldRun)
		want  Outcome
		stage fleet.Stage
	}{
		{name: "release on shutdown", stop: func(h heldRun) { h.r.cancel(errShutdown) }, want: OutcomeInterrupted, stage: fleet.StageQueued},
		{name: "acknowledge a cancel", stop: func(h heldRun) {
			h.c.mu.Lock()
			h.c.job.CancelRequested = true
			h.c.mu.Unlock()
			// The lease keeper renews on the factory's clock, which stands
			// still here: the control message has the run ask at once.
			h.a.handle(context.Background(), transport.Delivery{ID: "c", Control: &protocol.ControlMessage{
				Action: protocol.ControlCancel, JobID: "j1", ProductID: "p", TargetFactoryID: "f1", LeaseEpoch: h.cl.LeaseEpoch}})
		}, want: OutcomeStopped, stage: fleet.StageCancelled},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			clk := clocktest.New(time.Date(2026, 11, 18, 10, 0, 0, 0, time.UTC))
			h := startHeldRun(t, 0, func(a *Agent) { a.clock = clk })
			// Origin hangs on the checkpoint's push until the gate opens,
			// then refuses it.
			gates := t.TempDir()
			entered, gate := fifo(t, gates, "entered"), fifo(t, gates, "gate")
			hook := filepath.Join(h.repo.origin, "hooks", "pre-receive")
			require.NoError(t, os.WriteFile(hook, []byte(`#!/bin/sh
while read old new ref; do
	case "$ref" in refs/heads/aq/wip/*) echo up > `+entered+`; cat `+gate+` > /dev/null; exit 1;; esac
done
`), 0o755))
			tt.stop(h)
			waitUp(t, entered)
			clk.Advance(localTimeout) // the push hangs past a local step's time
			openGate(t, gate)
			require.Equal(t, tt.want, waitRun(t, h.r, "the stopped run"))

			require.Empty(t, h.repo.ref("aq/wip/j1"), "the checkpoint was not pushed")
			h.c.mu.Lock()
			defer h.c.mu.Unlock()
			require.Equal(t, tt.stage, h.c.job.Stage, "the job was released")
			require.Empty(t, h.c.job.HolderFactoryID)
		})
	}
}
