package coord_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gigafactory/fleet/shared/coord"
)

// Two instances on one store, each with its own caches: what one caches
// may be stale by its TTL, but what it decides from it must not break a
// guarantee past that TTL.

// TestSeatCapSetElsewhereCountsTheClaim: a cap set through instance A while
// B holds the product cached uncapped applies to B's claim: the claim reads
// the product fresh to pass over held jobs, so the seat it takes is decided
// on that copy, not on B's cache. Once every cache is past its TTL the cap
// holds (a claim that took no seat would leave the product over its cap for
// as long as that run goes).
func TestSeatCapSetElsewhereCountsTheClaim(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.factory("f1")
	e.factory("f2")
	b := e.peer()
	_, _, err := b.Submit(e.ctx, prod, manifest()) // B caches the product, uncapped
	require.NoError(t, err)
	e.submit()

	e.capSeats(1)
	cl, err := b.Claim(e.ctx, e.as("f1"))
	require.NoError(t, err)
	require.NotNil(t, cl, "one seat is free")
	require.Equal(t, 1, e.product().Running(), "B's claim took the seat")

	e.clock.Advance(2 * e.c.Config().FactoryCacheTTL)
	for _, c := range []*coord.Coordinator{e.c, b} {
		none, err := c.Claim(e.ctx, e.as("f2"))
		require.NoError(t, err)
		require.Nil(t, none, "maxRunning 1 with one run going")
	}
}
