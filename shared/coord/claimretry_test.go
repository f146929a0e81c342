package coord_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gigafactory/fleet/shared/coord"
	"github.com/gigafactory/fleet/shared/fleet"
)

// TestClaimRetryReturnsSameLease: a poll claim whose answer was lost and
// that is retried with the same request id gets the same lease back (same
// job, epoch and expiry, no second claim), so the job is not left leased to
// expire and spend an attempt: with maxAttempts 1 it still runs and ships.
func TestClaimRetryReturnsSameLease(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.factory("f1")
	j := e.submit("maxAttempts: 1", "priority: high")
	other := e.submit("title: another job")
	req := e.as("f1")
	req.RequestID = "claim-0001"

	first, err := e.c.Claim(e.ctx, req)
	require.NoError(t, err)
	require.Equal(t, j.ID, first.Job.ID)
	// The answer is lost; the factory retries a little later.
	e.clock.Advance(10 * time.Second)
	again, err := e.c.Claim(e.ctx, req)
	require.NoError(t, err)
	require.NotNil(t, again)
	require.Equal(t, j.ID, again.Job.ID)
	require.Equal(t, first.LeaseEpoch, again.LeaseEpoch)
	require.Equal(t, first.LeaseExpiresAt, again.LeaseExpiresAt)
	require.Equal(t, []string{"submitted", "claimed"}, eventTypes(e.events(j.ID)), "one claim, not two")
	require.Equal(t, fleet.StageQueued, e.job(other.ID).Stage, "the retry took no second job")

	for _, st := range []fleet.Stage{fleet.StageBuilding, fleet.StageShipped} {
		_, err := e.c.Patch(e.ctx, "f1", prod, j.ID, coord.PatchRequest{Stage: st, LeaseEpoch: again.LeaseEpoch})
		require.NoError(t, err)
	}
	got := e.job(j.ID)
	require.Equal(t, fleet.StageShipped, got.Stage)
	require.Zero(t, got.Attempts)

	// A new request id is a new claim.
	req.RequestID = "claim-0002"
	next, err := e.c.Claim(e.ctx, req)
	require.NoError(t, err)
	require.Equal(t, other.ID, next.Job.ID)
}

// TestClaimRetryOnlyForTheSameLease: the request id returns a lease only
// while the same factory still holds it at the epoch that claim took; a
// retry after the lease was released (or reaped) claims afresh, and
// another factory using the same id gets nothing of the first's.
func TestClaimRetryOnlyForTheSameLease(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.factory("f1")
	e.factory("f2")
	j := e.submit()
	req := e.as("f1")
	req.RequestID = "same-id"
	first, err := e.c.Claim(e.ctx, req)
	require.NoError(t, err)
	require.Equal(t, j.ID, first.Job.ID)

	theirs := e.as("f2")
	theirs.RequestID = "same-id"
	none, err := e.c.Claim(e.ctx, theirs)
	require.NoError(t, err)
	require.Nil(t, none, "another factory's request id is its own")

	_, err = e.c.Release(e.ctx, "f1", prod, j.ID, first.LeaseEpoch)
	require.NoError(t, err)
	again, err := e.c.Claim(e.ctx, req)
	require.NoError(t, err)
	require.NotNil(t, again)
	require.Equal(t, first.LeaseEpoch+1, again.LeaseEpoch, "a fresh claim, not the released lease")

	_, err = e.c.Claim(e.ctx, coord.ClaimRequest{Token: req.Token, RequestID: "not a valid id!"})
	requireCode(t, err, fleet.CodeInvalid, "requestId")
}
