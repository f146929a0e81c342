//go:build linux

package engine

import (
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// The run reaper is the fallback where cgroups cannot be used: the factory
// binary, started with ReaperArg, becomes a child subreaper
// (PR_SET_CHILD_SUBREAPER) and starts the engine. Every process the run
// starts is then its descendant: one that leaves its process group and
// session (setsid, a double fork) is reparented to the reaper when its
// parent exits, never to init. When the engine exits, or on
// reaperKillSignal (the factory's stop after the grace, or its death: it
// is the reaper's parent-death signal), the reaper kills every descendant
// until none is left, then exits as the engine did. The reaper runs as the
// factory's user and starts the engine with the run's credentials, so an
// engine on a seat uid cannot kill it.

// prSetChildSubreaper is PR_SET_CHILD_SUBREAPER.
const prSetChildSubreaper = 36

// reaperSupported: Linux has child subreapers.
const reaperSupported = true

func parseCred(s string) (*syscall.Credential, error) {
	if s == "-" {
		return nil, nil
	}
	parts := strings.SplitN(s, ":", 3)
	if len(parts) != 3 {
		return nil, fmt.Errorf("credential %q", s)
	}
	uid, err1 := strconv.ParseUint(parts[0], 10, 32)
	gid, err2 := strconv.ParseUint(parts[1], 10, 32)
	if err := errors.Join(err1, err2); err != nil {
		return nil, err
	}
	c := &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
	for g := range strings.SplitSeq(parts[2], ",") {
		if g == "" {
			continue
		}
		n, err := strconv.ParseUint(g, 10, 32)
		if err != nil {
			return nil, err
		}
		c.Groups = append(c.Groups, uint32(n))
	}
	return c, nil
}

func reaperMain(args []string) int {
	if len(args) < 3 || args[1] != "--" {
		fmt.Fprintln(os.Stderr, "fleet run reaper: usage: "+ReaperArg+" <uid:gid:groups|-> -- <argv>")
		return 127
	}
	cred, err := parseCred(args[0])
	if err != nil {
		fmt.Fprintln(os.Stderr, "fleet run reaper:", err)
		return 127
	}
	if _, _, errno := syscall.RawSyscall(syscall.SYS_PRCTL, prSetChildSubreaper, 1, 0); errno != 0 {
		fmt.Fprintln(os.Stderr, "fleet run reaper: PR_SET_CHILD_SUBREAPER:", errno)
		return 127
	}
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, reaperKillSignal)
	attr := &os.ProcAttr{Files: []*os.File{os.Stdin, os.Stdout, os.Stderr},
		Sys: &syscall.SysProcAttr{Setpgid: true, Credential: cred}}
	// args[2] is a path: Run resolved the program as it does without a
	// reaper.
	engine, err := os.StartProcess(args[2], args[2:], attr)
	if err != nil {
		fmt.Fprintln(os.Stderr, "fleet run reaper: start:", err)
		return 127
	}
	pgid := engine.Pid
	exited := make(chan syscall.WaitStatus, 1)
	go reapAll(engine.Pid, exited)
	var ws syscall.WaitStatus
	select {
	case ws = <-exited:
	case <-waitSignal(sigs, pgid):
		ws = <-killAll(pgid, exited)
	}
	// The engine is gone: end everything it left.
	killAll(pgid, nil)
	if ws.Signaled() {
		signal.Reset(ws.Signal())
		_ = syscall.Kill(os.Getpid(), ws.Signal())
		return 128 + int(ws.Signal())
	}
	return ws.ExitStatus()
}

// waitSignal forwards SIGTERM-like signals to the engine's group and
// returns once the kill signal arrives.
func waitSignal(sigs chan os.Signal, pgid int) <-chan os.Signal {
	out := make(chan os.Signal, 1)
	go func() {
		for sig := range sigs {
			if sig == reaperKillSignal {
				out <- sig
				return
			}
			_ = syscall.Kill(-pgid, sig.(syscall.Signal))
		}
	}()
	return out
}

// reapAll reaps every child (the engine and the orphans reparented here)
// and reports the engine's status.
func reapAll(enginePid int, exited chan<- syscall.WaitStatus) {
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, 0, nil)
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if err != nil {
			// ECHILD: none left now; more may be reparented later.
			time.Sleep(5 * time.Millisecond)
			continue
		}
		if pid == enginePid {
			exited <- ws
		}
	}
}

// killAll kills the engine's group and every descendant of this process
// until none is left; with exited, it first waits for the engine's status.
func killAll(pgid int, exited <-chan syscall.WaitStatus) <-chan syscall.WaitStatus {
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
	out := make(chan syscall.WaitStatus, 1)
	if exited != nil {
		out <- <-exited
	}
	self := os.Getpid()
	deadline := time.Now().Add(procKillWait)
	for time.Now().Before(deadline) {
		kids := descendants(self)
		if len(kids) == 0 {
			break
		}
		for _, pid := range kids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		time.Sleep(2 * time.Millisecond)
	}
	return out
}

// descendants lists the live processes below pid.
func descendants(root int) []int {
	parent := map[int]int{}
	pids(func(pid int) bool {
		if pp, ok := liveParent(pid); ok {
			parent[pid] = pp
		}
		return false
	})
	var out []int
	for pid := range parent {
		hops := 0
		for p := parent[pid]; p > 1 && hops < 1000; p, hops = parent[p], hops+1 {
			if p == root {
				out = append(out, pid)
				break
			}
			if _, ok := parent[p]; !ok {
				break
			}
		}
	}
	return out
}
