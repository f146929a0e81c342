package dag_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gigafactory/fleet/shared/clock/clocktest"
	"github.com/gigafactory/fleet/shared/coord/dag"
	"github.com/gigafactory/fleet/shared/coord/internal/kernel"
	"github.com/gigafactory/fleet/shared/fleet"
	"github.com/gigafactory/fleet/shared/store"
	"github.com/gigafactory/fleet/shared/store/sqlite"
)

// recorder is a Lifecycle that records the moves dag asks for and makes
// none.
type recorder struct {
	dag.Lifecycle // PrepareJob, CreateJob and Cancel are not called here
	got           *[]string
}

func (r recorder) Move(_ context.Context, m dag.Move) (*fleet.Job, error) {
	*r.got = append(*r.got, "move "+m.JobID+" to "+string(m.To)+" by "+string(m.Actor)+" ("+string(m.Event)+")")
	return &fleet.Job{ID: m.JobID, ProductID: m.ProductID, Stage: m.To}, nil
}

// TestSettleOnEndAfterEarlierObservers: dag.New registers the observer
// that settles, through the lifecycle, the jobs waiting on a job that
// ended (a dependant and the parent), after the observers registered
// before it (admission's).
func TestSettleOnEndAfterEarlierObservers(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "fleet.db"))
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, s.Close()) })
	k := &kernel.Kernel{Store: s, Clock: clocktest.New(time.Unix(0, 0)), Log: slog.New(slog.DiscardHandler),
		Counters: &kernel.Counters{}, Jobs: kernel.NewItemCache(16)}
	child := &fleet.Job{ID: "c", ProductID: "p1", Stage: fleet.StageShipped, ParentID: "parent", HasDependants: true, Deps: []string{}}
	for _, j := range []*fleet.Job{
		child,
		{ID: "parent", ProductID: "p1", Stage: fleet.StageBlocked, Children: []string{"c"}, Deps: []string{}},
		{ID: "d", ProductID: "p1", Stage: fleet.StageBlocked, Deps: []string{"c"}},
		{ID: "other", ProductID: "p1", Stage: fleet.StageBlocked, Deps: []string{"elsewhere"}},
	} {
		body, err := json.Marshal(j)
		require.NoError(t, err)
		_, err = s.Create(ctx, store.Jobs, j.ProductID, j.ID, body)
		require.NoError(t, err)
	}

	var got []string
	k.Observe(func(context.Context, kernel.Transition) { got = append(got, "earlier observer") })
	dag.New(k, recorder{got: &got})
	k.Committed(ctx, kernel.Transition{Before: &fleet.Job{ID: "c", Stage: fleet.StageTesting}, After: child})
	require.Equal(t, []string{
		"earlier observer",
		"move d to queued by system (unblocked)",
		"move parent to queued by system (unblocked)",
	}, got)
}
