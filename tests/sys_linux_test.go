package tests

import (
	"os/exec"
	"syscall"
)

// dieWithTests has cmd signalled when the test binary dies, a timeout's
// panic included, so that no stack or factory outlives the run that
// started it (and holds ports and CPU for the next one). The stack gets
// SIGTERM, which it stops on as on Ctrl-C, taking its children with it.
func dieWithTests(cmd *exec.Cmd, sig syscall.Signal) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Pdeathsig = sig
}
