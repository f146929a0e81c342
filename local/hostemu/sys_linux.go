package hostemu

import (
	"context"
	"os"
	"syscall"
)

// childAttr makes the kernel kill the handler when the emulator dies, even by
// SIGKILL, so a crashed local host never leaves an orphan serving stale code
// on its port.
func childAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}

// notifyChanges watches paths with inotify: a write or a change of times
// (the store's change markers are touched) signals at once, with no
// polling. The watches are in place when it returns, so no change after
// the call is missed. The returned function signals on ch until ctx ends
// (true) or reading the events fails (false: the caller polls instead).
func notifyChanges(paths []string) (func(ctx context.Context, ch chan<- struct{}) bool, error) {
	fd, err := syscall.InotifyInit1(syscall.IN_NONBLOCK | syscall.IN_CLOEXEC)
	if err != nil {
		return nil, err
	}
	for _, p := range paths {
		if _, err := syscall.InotifyAddWatch(fd, p, syscall.IN_ATTRIB|syscall.IN_MODIFY|syscall.IN_CLOSE_WRITE); err != nil {
			_ = syscall.Close(fd)
			return nil, err
		}
	}
	// Non-blocking, so the runtime's poller reads it and Close ends a read.
	f := os.NewFile(uintptr(fd), "inotify")
	return func(ctx context.Context, ch chan<- struct{}) bool {
		stop := context.AfterFunc(ctx, func() { _ = f.Close() })
		defer func() {
			stop()
			_ = f.Close()
		}()
		buf := make([]byte, 64*(syscall.SizeofInotifyEvent+syscall.NAME_MAX+1))
		for {
			if _, err := f.Read(buf); err != nil {
				return ctx.Err() != nil
			}
			signal(ch)
		}
	}, nil
}
