//go:build linux

package engine

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// procKillWait bounds the kill-and-look-again loops below.
const procKillWait = 5 * time.Second

// pids lists the processes match accepts, never this one.
func pids(match func(pid int) bool) []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	self := os.Getpid()
	var out []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self || pid <= 1 {
			continue
		}
		if match(pid) {
			out = append(out, pid)
		}
	}
	return out
}

// hasUID reports whether any of pid's real, effective, saved or file
// system uids is uid.
func hasUID(pid int, uid uint32) bool {
	return slices.Contains(uidsOf(pid), uid)
}

// isZombie reports whether pid has exited and waits for its parent.
func isZombie(pid int) bool {
	_, ok := liveParent(pid)
	return !ok
}

// liveParent is pid's parent, from one read of /proc/<pid>/stat; ok is
// false when pid is gone or a zombie.
func liveParent(pid int) (ppid int, ok bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, false // gone
	}
	// pid (comm) state ppid ...: comm may hold spaces and parentheses.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, false
	}
	f := bytes.Fields(b[i+1:])
	if len(f) < 2 || f[0][0] == 'Z' || f[0][0] == 'X' {
		return 0, false
	}
	ppid, err = strconv.Atoi(string(f[1]))
	return ppid, err == nil
}

// UIDsInUse lists the uids from first to last that a live process runs
// as, in one pass over /proc.
func UIDsInUse(first, last uint32) []uint32 {
	seen := map[uint32]bool{}
	pids(func(pid int) bool {
		for _, uid := range uidsOf(pid) {
			if uid >= first && uid <= last && !seen[uid] && !isZombie(pid) {
				seen[uid] = true
			}
		}
		return false
	})
	out := make([]uint32, 0, len(seen))
	for uid := range seen {
		out = append(out, uid)
	}
	return out
}

// uidsOf is pid's real, effective, saved and file system uids.
func uidsOf(pid int) []uint32 {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return nil
	}
	for line := range strings.Lines(string(b)) {
		rest, ok := strings.CutPrefix(line, "Uid:")
		if !ok {
			continue
		}
		var out []uint32
		for _, f := range strings.Fields(rest) {
			if n, err := strconv.ParseUint(f, 10, 32); err == nil {
				out = append(out, uint32(n))
			}
		}
		return out
	}
	return nil
}

// PIDsOfUID lists the live processes running as uid.
func PIDsOfUID(uid uint32) []int {
	return pids(func(pid int) bool { return hasUID(pid, uid) && !isZombie(pid) })
}

// KillUID ends every process of uid: SIGKILL to each one found, from
// within (a process of uid doing kill(-1), which reaches all of them at
// once, so a loop forking faster than /proc can be read is stopped too),
// and again until none is left. uid must be a seat uid nothing else uses;
// never root.
func KillUID(uid uint32) error {
	if uid == 0 {
		return fmt.Errorf("refusing to kill every process of uid 0")
	}
	deadline := time.Now().Add(procKillWait)
	for {
		live := PIDsOfUID(uid)
		if len(live) == 0 {
			return nil
		}
		for _, pid := range live {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		killAllAs(uid)
		if time.Now().After(deadline) {
			return fmt.Errorf("processes of uid %d still alive after %s: %v", uid, procKillWait, live)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// killAllAs runs kill(-1, SIGKILL) as uid (needs root): every process of
// uid but the killer itself gets it in one system call.
func killAllAs(uid uint32) {
	if os.Geteuid() != 0 {
		return
	}
	cmd := exec.Command("/bin/sh", "-c", "kill -9 -1")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: uid}}
	_ = cmd.Run()
}

// hasMark reports whether pid's environment (as it was exec'd) holds
// MarkEnv with value mark, or, with prefix, a value starting with mark.
func hasMark(pid int, mark string, prefix bool) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/environ")
	if err != nil {
		return false
	}
	want := []byte(MarkEnv + "=" + mark)
	for kv := range bytes.SplitSeq(b, []byte{0}) {
		if bytes.Equal(kv, want) || (prefix && bytes.HasPrefix(kv, want)) {
			return true
		}
	}
	return false
}

// KillMarked ends every process whose environment carries the mark (see
// MarkEnv), with prefix every one whose mark starts with it: the fallback
// where cgroups cannot be used. setsid, a double fork and nohup keep the
// environment; a process that execs with a cleared one escapes this.
func KillMarked(mark string, prefix bool) ([]int, error) {
	if mark == "" {
		return nil, nil
	}
	deadline := time.Now().Add(procKillWait)
	var killed []int
	for {
		live := pids(func(pid int) bool { return !isZombie(pid) && hasMark(pid, mark, prefix) })
		if len(live) == 0 {
			return killed, nil
		}
		for _, pid := range live {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		killed = append(killed, live...)
		if time.Now().After(deadline) {
			return killed, fmt.Errorf("processes marked %s still alive after %s: %v", mark, procKillWait, live)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
