package hostemu

import "syscall"

// childAttr makes the kernel kill the handler when the emulator dies, even by
// SIGKILL, so a crashed local host never leaves an orphan serving stale code
// on its port.
func childAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
