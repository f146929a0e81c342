//go:build !unix

package fs

import "os"

// Without flock(2) only this process's mutex serialises commits and
// deletes: one process may use the directory at a time.
func lockFileExclusive(*os.File) error { return nil }

func unlockFile(*os.File) error { return nil }
