//go:build !linux

package tests

import (
	"os/exec"
	"syscall"
)

// dieWithTests: only Linux has a parent-death signal.
func dieWithTests(*exec.Cmd, syscall.Signal) {}
