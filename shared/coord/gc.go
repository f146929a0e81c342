package coord

import (
	"context"
	"slices"

	"github.com/gigafactory/fleet/shared/fleet"
	"github.com/gigafactory/fleet/shared/protocol"
)

// GCPublisher delivers GC requests to factories; the dispatch transport
// implements it when it can.
type GCPublisher interface {
	PublishGC(ctx context.Context, req protocol.GCRequest) error
}

// terminalStages are the stages whose git state may be cleaned up.
var terminalStages = []string{string(fleet.StageShipped), string(fleet.StageFailed),
	string(fleet.StageDeadLetter), string(fleet.StageCancelled)}

// GCPlan groups terminal jobs by the factories that have their repo: each
// factory gets the terminal jobs of the repos it holds.
func (c *Coordinator) GCPlan(ctx context.Context) ([]protocol.GCRequest, error) {
	done, err := c.queryJobs(ctx, Query{Where: []Cond{In("stage", terminalStages...)}})
	if err != nil {
		return nil, err
	}
	byRepo := map[string][]string{}
	for _, j := range done {
		byRepo[j.Repo] = append(byRepo[j.Repo], j.ID)
	}
	factories, err := c.ListFactories(ctx, "")
	if err != nil {
		return nil, err
	}
	var plan []protocol.GCRequest
	for _, f := range factories {
		req := protocol.GCRequest{FactoryID: f.ID, Repos: map[string][]string{}}
		for _, r := range f.Repos {
			if ids := byRepo[r]; len(ids) > 0 {
				req.Repos[r] = slices.Sorted(slices.Values(ids))
			}
		}
		if len(req.Repos) > 0 {
			plan = append(plan, req)
		}
	}
	return plan, nil
}

// GCSweep sends each factory its GC request when the transport can carry
// one, and returns how many requests it sent. Without such a transport it
// sends none and factories clean up on their own at start and after each
// job.
func (c *Coordinator) GCSweep(ctx context.Context) (int, error) {
	gp, ok := c.publisher.(GCPublisher)
	if !ok {
		return 0, nil
	}
	plan, err := c.GCPlan(ctx)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, req := range plan {
		if err := gp.PublishGC(ctx, req); err != nil {
			return n, err
		}
		n++
	}
	return n, nil
}
