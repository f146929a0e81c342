//go:build unix

package fs

import (
	"os"
	"syscall"
)

// lockFileExclusive takes flock(2) on f: the lock other processes sharing
// the directory wait on. It is released by unlockFile or when f is closed.
func lockFileExclusive(f *os.File) error {
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX)
		if err != syscall.EINTR {
			return err
		}
	}
}

func unlockFile(f *os.File) error { return syscall.Flock(int(f.Fd()), syscall.LOCK_UN) }
