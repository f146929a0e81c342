//go:build unix

package fs

import (
	"os"
	"syscall"
)

// lock takes flock(2) on f, which processes sharing the directory wait on;
// closing f releases it.
func lock(f *os.File) error {
	for {
		if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != syscall.EINTR {
			return err
		}
	}
}
