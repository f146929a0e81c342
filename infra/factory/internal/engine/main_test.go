package engine

import (
	"os"
	"testing"
)

// TestMain lets the test binary act as a run's reaper, as the factory
// binary does.
func TestMain(m *testing.M) {
	MaybeReaper()
	os.Exit(m.Run())
}
