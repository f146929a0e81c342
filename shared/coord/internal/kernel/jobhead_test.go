package kernel

import (
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gigafactory/fleet/shared/fleet"
	"github.com/gigafactory/fleet/shared/internal/fill"
	"github.com/gigafactory/fleet/shared/store"
)

// filledJob is a job with every field set, as stored.
func filledJob(t testing.TB) store.Item {
	var j fleet.Job
	fill.Value(reflect.ValueOf(&j).Elem())
	body, err := marshal(&j)
	require.NoError(t, err)
	return store.Item{ID: j.ID, PartitionKey: j.ProductID, Rev: "7", Body: body}
}

// TestDecodeJobHead: the head of a stored job is DecodeJob's job with
// every field outside jobHeadFields zero.
func TestDecodeJobHead(t *testing.T) {
	t.Parallel()
	it := filledJob(t)
	whole, err := DecodeJob(it)
	require.NoError(t, err)
	head, err := DecodeJobHead(it)
	require.NoError(t, err)

	wv, hv := reflect.ValueOf(whole).Elem(), reflect.ValueOf(head).Elem()
	for i := range wv.NumField() {
		name := wv.Type().Field(i).Name
		switch {
		case slices.Contains(jobHeadFields, name), name == "Rev":
			require.False(t, wv.Field(i).IsZero(), "the filled job sets %s", name)
			require.Equal(t, wv.Field(i).Interface(), hv.Field(i).Interface(), name)
		default:
			require.True(t, hv.Field(i).IsZero(), "%s is not in the head", name)
		}
	}
}

// TestDecodeJobHeadErrors: a value the head holds must decode; one it does
// not hold is not read.
func TestDecodeJobHeadErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, body, wantErr string
	}{
		{name: "a bad time in the head", body: `{"id":"j1","stage":"queued","notBefore":"soon"}`, wantErr: "decode job j1"},
		{name: "a bad stage", body: `{"id":"j1","stage":7}`, wantErr: "decode job j1"},
		{name: "not JSON", body: `{"id":"j1",`, wantErr: "decode job j1"},
		{name: "a bad time outside the head", body: `{"id":"j1","stage":"assigned","leaseExpiresAt":"soon"}`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			j, err := DecodeJobHead(store.Item{ID: "j1", Body: []byte(tc.body)})
			if tc.wantErr != "" {
				require.ErrorContains(t, err, tc.wantErr)
				return
			}
			require.NoError(t, err)
			require.Equal(t, "j1", j.ID)
		})
	}
}

// shippedJob is a job as the bench's lifecycles leave it: shipped, with
// its ring of recent events and its run (about 1.5 KB).
func shippedJob(t testing.TB) store.Item {
	at := time.Date(2026, 11, 28, 21, 0, 0, 123456789, time.UTC)
	j := fleet.Job{ID: "01KB1X7Y2Z3A4B5C6D7E8F9G0H", ProductID: "life", Title: "lifecycle 417", Repo: "life-r1",
		Capabilities: []string{"go", "linux"}, Priority: fleet.PriorityNormal, Stage: fleet.StageShipped,
		Body: "Benchmark job lifecycle 417: do nothing.\n", LeaseEpoch: 1, DispatchEpoch: 1, TargetFactoryID: "life-1",
		Dispatch: fleet.Dispatch{At: at}, MaxAttempts: 3, Deps: []string{}, DepsMode: fleet.DepsAll,
		Admitted: &fleet.Admitted{LeaseEpoch: 1, Seat: true}, QueuedAt: at, EventSeq: 5, CreatedAt: at, UpdatedAt: at}
	for seq, to := range []fleet.Stage{fleet.StageQueued, fleet.StageAssigned, fleet.StageBuilding, fleet.StageShipped} {
		j.RecentEvents = append(j.RecentEvents, fleet.Event{Seq: int64(seq + 1), Type: fleet.EventStage, To: to,
			Actor: fleet.ActorFactory, ActorID: "life-1", Message: "stage " + string(to), At: at})
	}
	j.Runs = []fleet.Run{{ID: j.ID + ":1", JobID: j.ID, ProductID: j.ProductID, FactoryID: "life-1", LeaseEpoch: 1,
		Result: fleet.RunSucceeded, StartedAt: at, EndedAt: at}}
	body, err := marshal(&j)
	require.NoError(t, err)
	return store.Item{ID: j.ID, PartitionKey: j.ProductID, Rev: "7", Body: body}
}

// BenchmarkDecodeJob: a job with every field set, and a shipped one,
// decoded whole and their heads only.
func BenchmarkDecodeJob(b *testing.B) {
	for _, doc := range []struct {
		name string
		it   store.Item
	}{{"filled", filledJob(b)}, {"shipped", shippedJob(b)}} {
		for _, dec := range []struct {
			name   string
			decode func(store.Item) (*fleet.Job, error)
		}{{"whole", DecodeJob}, {"head", DecodeJobHead}} {
			b.Run(doc.name+"/"+dec.name, func(b *testing.B) {
				b.SetBytes(int64(len(doc.it.Body)))
				for b.Loop() {
					if _, err := dec.decode(doc.it); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
