package engine

import "syscall"

// sysProcAttr puts the engine in a process group of its own (so the whole
// group can be signalled) and has the kernel kill it if the factory dies
// without cleaning up (kill -9), rather than leave it editing a worktree
// nobody owns. The death signal survives the exec of a shell script.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
