//go:build unix && !linux

package engine

import "syscall"

// sysProcAttr puts the engine in a process group of its own, so the whole
// group can be signalled. Only Linux has a parent-death signal; elsewhere a
// factory killed with -9 leaves its engine running until it exits.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}

// setDeathSignal does nothing: only Linux has a parent-death signal.
func setDeathSignal(*syscall.SysProcAttr, syscall.Signal) {}
