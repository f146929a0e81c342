//go:build race

package tests

// The factory binary is built with the race detector when the tests run
// with it, so a data race in the agent under real load fails the test.
func init() { factoryBuildFlags = append(factoryBuildFlags, "-race") }
