//go:build !linux

package hostemu

import "syscall"

func childAttr() *syscall.SysProcAttr { return nil }
