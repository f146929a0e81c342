package dispatch_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gigafactory/fleet/functions/dispatch"
	"github.com/gigafactory/fleet/shared/fleet"
	"github.com/gigafactory/fleet/shared/funchost"
)

// feedBatch is the host's encoding of a change-feed batch of n shipped job
// documents of 1,351 bytes each (the bench's shipped job is about 1,550),
// each with the system fields the Cosmos DB trigger adds.
func feedBatch(tb testing.TB, n int) json.RawMessage {
	tb.Helper()
	at := time.Date(2026, 11, 28, 9, 0, 0, 0, time.UTC)
	docs := make([]json.RawMessage, n)
	for i := range docs {
		j := fleet.Job{
			ID: fmt.Sprintf("j%06d", i), ProductID: "p1", Title: `Fix the "flaky" test`, Repo: "acme/app",
			Capabilities: []string{"os:linux", "engine:claude", "repo:acme/app"}, Priority: fleet.PriorityNormal, Stage: fleet.StageShipped,
			Body:       strings.Repeat("Make the test pass.\n", 20),
			LeaseEpoch: 1, DispatchEpoch: 1, TargetFactoryID: "f-1", Dispatch: fleet.Dispatch{At: at},
			MaxAttempts: 3, Deps: []string{}, QueuedAt: at, EventSeq: 4,
		}
		for s, st := range []fleet.Stage{fleet.StageQueued, fleet.StageAssigned, fleet.StageBuilding, fleet.StageShipped} {
			j.RecentEvents = append(j.RecentEvents, fleet.Event{Seq: int64(s + 1), Type: "stage", To: st, Actor: "factory", ActorID: "f-1", At: at})
		}
		body, err := json.Marshal(j)
		require.NoError(tb, err)
		docs[i] = append(fmt.Appendf(nil, `{"_etag":"\"%d\"","_ts":1764320400,`, i+1), body[1:]...)
	}
	return funchost.EncodeDocuments(docs)
}

// BenchmarkItems is what every batch of the dispatch and echo functions
// costs before either looks at a job: decoding the host's encoding into
// store items.
func BenchmarkItems(b *testing.B) {
	raw := feedBatch(b, 3)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := dispatch.Items(raw); err != nil {
			b.Fatal(err)
		}
	}
}
