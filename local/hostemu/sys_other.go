//go:build !linux

package hostemu

import (
	"context"
	"errors"
	"syscall"
)

func childAttr() *syscall.SysProcAttr { return nil }

// notifyChanges: no change notification here; WatchFiles polls.
func notifyChanges([]string) (func(ctx context.Context, ch chan<- struct{}) bool, error) {
	return nil, errors.ErrUnsupported
}
