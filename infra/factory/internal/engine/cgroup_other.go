//go:build unix && !linux

package engine

import (
	"errors"
	"syscall"
)

// Only Linux has cgroups and /proc: elsewhere a run's processes are ended
// through its process group only.

var errLinuxOnly = errors.New("cgroups and /proc are Linux only")

// Cgroups is unavailable here.
type Cgroups struct{}

// OpenCgroups fails here.
func OpenCgroups(string) (*Cgroups, error) { return nil, errLinuxOnly }

// Dir is empty here.
func (c *Cgroups) Dir() string { return "" }

// Sweep does nothing here.
func (c *Cgroups) Sweep() ([]string, error) { return nil, nil }

// Close does nothing here.
func (c *Cgroups) Close() error { return nil }

// Create fails here.
func (c *Cgroups) Create(string) (*Cgroup, error) { return nil, errLinuxOnly }

// Cgroup is unavailable here.
type Cgroup struct{}

// Dir is empty here.
func (g *Cgroup) Dir() string { return "" }

// Remove does nothing here.
func (g *Cgroup) Remove() error { return nil }

func (g *Cgroup) apply(*syscall.SysProcAttr) {}

// SweepCgroupTree does nothing here.
func SweepCgroupTree(string) ([]string, error) { return nil, nil }

// UIDsInUse finds nothing here.
func UIDsInUse(uint32, uint32) []uint32 { return nil }

// PIDsOfUID finds nothing here.
func PIDsOfUID(uint32) []int { return nil }

// KillUID cannot look here.
func KillUID(uint32) error { return errLinuxOnly }

// KillMarked cannot look here.
func KillMarked(string, bool) ([]int, error) { return nil, nil }

// reaperSupported: only Linux has child subreapers.
const reaperSupported = false

func reaperMain([]string) int { return 127 }
