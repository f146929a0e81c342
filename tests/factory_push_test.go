package tests

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestFactoryPushTransport: the real factory program on the NATS transport
// against the real stack: the dispatch function targets it, it accepts the
// message and ships the job — no claim polling involved.
func TestFactoryPushTransport(t *testing.T) {
	t.Parallel()
	s := busStack(t)
	repo := newFacRepo(t, "app")
	s.Product("demo", "app")
	eng := facEngine(t, `printf 'pushed %s\n' "$FLEET_JOB_ID" >> result.txt`)
	f := startFactory(t, s, "fa", "demo", 2, repo, eng, "FLEET_TRANSPORT=nats", "FLEET_NATS_URL="+s.NATS)

	ids := []string{
		s.Submit("demo", Manifest("Push one", "app", "engine:fake")),
		s.Submit("demo", Manifest("Push two", "app", "engine:fake")),
	}
	for _, id := range ids {
		job := facWaitStage(t, s, "demo", id, "shipped", 60*time.Second)
		require.Equal(t, "fa", job["targetFactoryId"], "routed by the dispatcher")
		require.EqualValues(t, 1, job["dispatchEpoch"], "one dispatch, accepted")
		require.Equal(t, "pushed "+id, repo.Show(t, "aq/job/"+id, "result.txt"))
	}
	require.Contains(t, f.Output(), `"transport":"nats"`, "the factory ran on the NATS transport")
}
