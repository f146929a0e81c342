//go:build unix

package engine

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
)

// ReaperArg is the first argument that makes the factory binary a run's
// reaper.
const ReaperArg = "__fleet-run-reaper"

// reaperKillSignal tells a reaper to end the run now.
const reaperKillSignal = syscall.SIGUSR1

// reaperExe is this binary, when it can act as a reaper (MaybeReaper was
// called at start).
var reaperExe string

// MaybeReaper, called first thing in main, runs the reaper and exits when
// the process was started as one; otherwise it records that this binary
// can be one and returns.
func MaybeReaper() {
	if len(os.Args) > 1 && os.Args[1] == ReaperArg {
		os.Exit(reaperMain(os.Args[2:]))
	}
	if exe, err := os.Executable(); err == nil && reaperSupported {
		reaperExe = exe
	}
}

// reaperArgs is the reaper's command line for argv run with cred (nil:
// the reaper's own).
func reaperArgs(cred *syscall.Credential, argv []string) []string {
	c := "-"
	if cred != nil {
		gs := make([]string, len(cred.Groups))
		for i, g := range cred.Groups {
			gs[i] = strconv.FormatUint(uint64(g), 10)
		}
		c = fmt.Sprintf("%d:%d:%s", cred.Uid, cred.Gid, strings.Join(gs, ","))
	}
	return append([]string{ReaperArg, c, "--"}, argv...)
}
