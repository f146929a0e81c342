package runlogs

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gigafactory/fleet/shared/runlog"
)

// TestWokenIsHeldOnlyWhileWaitedOn: a wake-up entry goes when an append
// wakes it or when its last waiter leaves, as the streams of a run that
// ended do (no append ever comes); it is never held for good.
func TestWokenIsHeldOnlyWhileWaitedOn(t *testing.T) {
	t.Parallel()
	s := New(nil, nil)
	key := runlog.Key{Namespace: "p1", JobID: "j1", Epoch: 1}

	a, releaseA := s.Woken(key)
	b, releaseB := s.Woken(key)
	require.Equal(t, a, b, "one entry per log")
	releaseA()
	releaseA() // twice is once
	require.Len(t, s.wakers, 1, "a waiter is left")
	releaseB()
	require.Empty(t, s.wakers, "the last waiter took it away")

	c, releaseC := s.Woken(key)
	s.wake(key)
	require.Empty(t, s.wakers, "the wake took it away")
	select {
	case <-c:
	default:
		t.Fatal("the wake did not close it")
	}
	d, releaseD := s.Woken(key)
	releaseC() // after the wake: leaves the next entry alone
	require.Len(t, s.wakers, 1)
	require.NotEqual(t, c, d)
	releaseD()
	require.Empty(t, s.wakers)
}
