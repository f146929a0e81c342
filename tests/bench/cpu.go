package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"
)

// userHZ is the unit of the CPU times in /proc/<pid>/stat: USER_HZ, which
// Linux fixes at 100 in its user-space ABI whatever the kernel's HZ.
const userHZ = 100

// procCPU is the user + system CPU time a process has used so far, all its
// threads included. Linux only: elsewhere it fails, and the bench reports
// no CPU figures.
func procCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name is in parentheses and may hold spaces: fields count
	// from after its closing one. utime and stime are fields 14 and 15.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: no command name", pid)
	}
	f := bytes.Fields(b[i+1:])
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f))
	}
	var ticks int64
	for _, s := range f[11:13] {
		n, err := strconv.ParseInt(string(s), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc/%d/stat: %w", pid, err)
		}
		ticks += n
	}
	return time.Duration(ticks) * time.Second / userHZ, nil
}

// procWait is how long a process's threads have waited runnable on a run
// queue so far, summed over the threads it has now (Linux's
// /proc/<pid>/task/<tid>/schedstat, second field). A process that waits
// for a CPU while it has work is held back by its neighbours, not by its
// own code: phase 2's handler, the stack's bottleneck, is.
func procWait(pid int) (time.Duration, error) {
	files, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/schedstat", pid))
	if err != nil {
		return 0, err
	}
	if len(files) == 0 {
		return 0, fmt.Errorf("process %d: no schedstat", pid)
	}
	var sum time.Duration
	for _, f := range files {
		b, err := os.ReadFile(f)
		if errors.Is(err, os.ErrNotExist) {
			continue // the thread ended meanwhile
		}
		if err != nil {
			return 0, err
		}
		w, err := schedWait(b)
		if err != nil {
			return 0, fmt.Errorf("%s: %w", f, err)
		}
		sum += w
	}
	return sum, nil
}

// schedWait reads the run-queue wait (ns) of a schedstat line: "<time on
// CPU> <time waiting on a run queue> <timeslices>".
func schedWait(b []byte) (time.Duration, error) {
	f := bytes.Fields(b)
	if len(f) != 3 {
		return 0, fmt.Errorf("schedstat %q: want 3 fields", b)
	}
	ns, err := strconv.ParseInt(string(f[1]), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("schedstat %q: %w", b, err)
	}
	return time.Duration(ns), nil
}

// cpuSample is the CPU time of the three processes of a run and, where the
// kernel tells (waitOK), how long their threads waited for a CPU.
type cpuSample struct {
	at                                 time.Time
	handler, local, client             time.Duration
	waitOK                             bool
	handlerWait, localWait, clientWait time.Duration
}

// cpuUse is CPU time over a window, per process.
type cpuUse struct {
	WallSeconds    float64 `json:"wallSeconds"`
	HandlerSeconds float64 `json:"handlerSeconds"`
	LocalSeconds   float64 `json:"fleetLocalSeconds"` // host emulator + embedded NATS
	BenchSeconds   float64 `json:"benchSeconds"`      // this program: submitters and factories
	// Busy is the three processes' CPU time over the wall time times the
	// CPUs: 1 means every CPU was busy with the run.
	Busy float64 `json:"busy"`
	// Wait is each process's threads' time runnable on a run queue, summed,
	// over the wall time (0.17: a sixth of the window); nil where the
	// kernel does not tell.
	Wait *cpuWait `json:"runQueueWait,omitempty"`
}

// cpuWait is run-queue wait per process, as a share of a window.
type cpuWait struct {
	Handler float64 `json:"handler"`
	Local   float64 `json:"fleetLocal"`
	Bench   float64 `json:"bench"`
}

// sampleCPU reads the CPU times; ok is false where the OS does not tell.
func (s *session) sampleCPU(handlerPID int) (cpuSample, bool) {
	c := cpuSample{at: time.Now()}
	var err1, err2, err3 error
	c.handler, err1 = procCPU(handlerPID)
	c.local, err2 = procCPU(s.st.cmd.Process.Pid)
	c.client, err3 = procCPU(os.Getpid())
	var w1, w2, w3 error
	c.handlerWait, w1 = procWait(handlerPID)
	c.localWait, w2 = procWait(s.st.cmd.Process.Pid)
	c.clientWait, w3 = procWait(os.Getpid())
	c.waitOK = w1 == nil && w2 == nil && w3 == nil
	return c, err1 == nil && err2 == nil && err3 == nil
}

// cpuPerItem is each process's CPU time in ms per item (a job, a
// lifecycle) of a window.
type cpuPerItem struct{ Handler, Local, Bench float64 }

func (p cpuPerItem) Total() float64 { return p.Handler + p.Local + p.Bench }

// per divides the window's CPU time by the n items it carried.
func (u *cpuUse) per(n int) cpuPerItem {
	ms := func(sec float64) float64 { return 1000 * sec / float64(n) }
	return cpuPerItem{Handler: ms(u.HandlerSeconds), Local: ms(u.LocalSeconds), Bench: ms(u.BenchSeconds)}
}

func cpuBetween(a, b cpuSample, cpus int) *cpuUse {
	u := &cpuUse{
		WallSeconds:    b.at.Sub(a.at).Seconds(),
		HandlerSeconds: (b.handler - a.handler).Seconds(),
		LocalSeconds:   (b.local - a.local).Seconds(),
		BenchSeconds:   (b.client - a.client).Seconds(),
	}
	u.Busy = (u.HandlerSeconds + u.LocalSeconds + u.BenchSeconds) / (u.WallSeconds * float64(cpus))
	if a.waitOK && b.waitOK {
		share := func(x, y time.Duration) float64 { return (y - x).Seconds() / u.WallSeconds }
		u.Wait = &cpuWait{Handler: share(a.handlerWait, b.handlerWait), Local: share(a.localWait, b.localWait), Bench: share(a.clientWait, b.clientWait)}
	}
	return u
}

// String is run-queue wait as the report prints it.
func (w *cpuWait) String() string {
	return fmt.Sprintf("handler %.0f%%, fleet-local %.0f%%, bench %.0f%%", 100*w.Handler, 100*w.Local, 100*w.Bench)
}
