package main

import "syscall"

// childAttr puts a child in a process group of its own and has the kernel
// send it SIGTERM should the demo die without stopping it (kill -9), so it
// never outlives the demo.
func childAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
}
