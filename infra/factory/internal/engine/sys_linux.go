package engine

import "syscall"

// sysProcAttr puts the engine in a process group of its own (so the whole
// group can be signalled) and has the kernel kill it if the factory dies
// without cleaning up (kill -9), rather than leave it editing a worktree
// nobody owns. The death signal survives the exec of a shell script. The
// kernel ties it to the thread that forked, not the process; the Go runtime
// only retires threads of goroutines that exit while locked to them, which
// this program never does. It reaches the engine itself, not grandchildren
// it started; those end when the engine's group is killed, or, after a
// kill -9 of the factory, when they finish on their own.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

// setDeathSignal sets the signal the process gets when the factory dies.
func setDeathSignal(a *syscall.SysProcAttr, sig syscall.Signal) { a.Pdeathsig = sig }
