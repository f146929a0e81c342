package main

import (
	"bytes"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestLatencySplitLeavesTheWarmupOut: the warm-up's jobs are in none of
// phase 1's figures (latency, slowest jobs, receive stage, jobs per
// factory) and are reported apart, the first by submit time as the first.
func TestLatencySplitLeavesTheWarmupOut(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	r := newLatencyRecorder(6)
	for i, j := range []struct {
		id      string
		warm    bool
		latency time.Duration
		factory string
	}{
		{"w0", true, 18 * time.Millisecond, "a"}, // the fresh stack's first job
		{"w1", true, 12 * time.Millisecond, "b"},
		{"w2", true, 4 * time.Millisecond, "a"},
		{"m0", false, 3 * time.Millisecond, "a"},
		{"m1", false, 2 * time.Millisecond, "b"},
		{"m2", false, 5 * time.Millisecond, "b"},
	} {
		sent := t0.Add(time.Duration(i) * 10 * time.Millisecond)
		r.submit(j.id, sent, time.Millisecond, j.warm)
		r.received[j.id] = sent.Add(j.latency)
		r.stored[j.id] = sent.Add(j.latency - time.Millisecond/2)
		r.factoryOf[j.id] = j.factory
	}
	sp, err := r.split()
	require.NoError(t, err)
	require.ElementsMatch(t, []time.Duration{3 * time.Millisecond, 2 * time.Millisecond, 5 * time.Millisecond}, sp.latency)
	require.Len(t, sp.tail, 3)
	require.Equal(t, []string{"m1", "m0", "m2"}, []string{sp.tail[0].id, sp.tail[1].id, sp.tail[2].id}, "sorted by latency")
	require.Len(t, sp.receive, 3)
	require.Equal(t, map[string]int{"a": 1, "b": 2}, sp.perFactory)
	require.Len(t, r.submitDur, 3, "the submit POST's p50 is of the measured jobs")
	require.Equal(t, &warmupResult{Jobs: 3, FirstMs: 18, P50Ms: 12, MaxMs: 18}, sp.warmup)

	// Without warm-up nothing is reported apart; a job never received is
	// an error.
	r = newLatencyRecorder(1)
	r.submit("m0", t0, time.Millisecond, false)
	_, err = r.split()
	require.ErrorContains(t, err, "m0 was accepted by nobody")
	r.received["m0"], r.stored["m0"] = t0.Add(time.Millisecond), t0
	sp, err = r.split()
	require.NoError(t, err)
	require.Nil(t, sp.warmup)
}

// TestLatencyCPUPerJob: phase 1's CPU row divides each process's CPU time
// by the measured jobs (not the warm-up's) and shows the CPUs' share busy;
// without the samples there is no row.
func TestLatencyCPUPerJob(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	before := cpuSample{at: t0, handler: time.Second, local: time.Second, client: time.Second}
	after := cpuSample{at: t0.Add(20 * time.Second), handler: 8 * time.Second, local: 10 * time.Second, client: 5 * time.Second}
	r := &results{
		Machine: machineInfo{CPUs: 2},
		Latency: &latencyResult{Jobs: 2000, Factories: 4, RateAchieved: 100, CPU: cpuBetween(before, after, 2)},
	}
	var out bytes.Buffer
	r.print(&out)
	require.Regexp(t, `CPU per job: handler \+ emulator and NATS \+ clients; the 2 CPUs' share busy\s+10\.00 ms \(3\.50 \+ 4\.50 \+ 2\.00\); 50%`, out.String())

	require.NotContains(t, out.String(), "waiting runnable", "no wait figures without schedstat samples")

	before.waitOK, after.waitOK = true, true
	after.handlerWait, after.localWait, after.clientWait = 4*time.Second, 10*time.Second, time.Second
	r.Latency.CPU = cpuBetween(before, after, 2)
	out.Reset()
	r.print(&out)
	require.Regexp(t, `waiting runnable for a CPU, each process's threads summed, share of the phase\s+handler 20%, fleet-local 50%, bench 5%`, out.String())

	r.Latency.CPU = nil
	out.Reset()
	r.print(&out)
	require.NotContains(t, out.String(), "CPU per job")
}

// TestSchedWait: the run-queue wait is a schedstat line's second field, in
// nanoseconds; anything else is an error, not a zero.
func TestSchedWait(t *testing.T) {
	t.Parallel()
	w, err := schedWait([]byte("4141000000 842000000 12345\n"))
	require.NoError(t, err)
	require.Equal(t, 842*time.Millisecond, w)
	for _, bad := range []string{"", "1 2", "1 x 3", "1 2 3 4"} {
		_, err := schedWait([]byte(bad))
		require.Error(t, err, "%q", bad)
	}
}

// TestProcWaitReadsThisProcess: on Linux the bench's own threads have
// schedstat lines that procWait reads. (Not that a second read is larger:
// a thread that ends between the reads takes its wait with it.)
func TestProcWaitReadsThisProcess(t *testing.T) {
	t.Parallel()
	if _, err := os.Stat("/proc/self/task"); err != nil {
		t.Skip("no /proc: the bench reports no wait figures here")
	}
	w, err := procWait(os.Getpid())
	require.NoError(t, err)
	require.GreaterOrEqual(t, w, time.Duration(0))
	_, err = procWait(-1)
	require.Error(t, err, "a process that does not exist")
}
