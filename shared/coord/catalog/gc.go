package catalog

import (
	"context"
	"slices"

	"github.com/gigafactory/fleet/shared/coord/internal/kernel"
	"github.com/gigafactory/fleet/shared/fleet"
	"github.com/gigafactory/fleet/shared/protocol"
	"github.com/gigafactory/fleet/shared/store"
)

// GCPublisher delivers GC requests to factories; the dispatch transport
// implements it when it can.
type GCPublisher interface {
	PublishGC(ctx context.Context, req protocol.GCRequest) error
}

// terminalStages are the stages whose git state may be cleaned up.
var terminalStages = []string{string(fleet.StageShipped), string(fleet.StageFailed),
	string(fleet.StageDeadLetter), string(fleet.StageCancelled)}

// GCPlan groups terminal jobs by product and repo, and gives each factory
// the terminal jobs of the repos it holds in the products it serves. A repo
// name alone says nothing about whose git state it is: a factory never gets
// (nor learns the ids of) another product's jobs.
func (c *Service) GCPlan(ctx context.Context) ([]protocol.GCRequest, error) {
	plan, _, err := c.gcPlan(ctx)
	return plan, err
}

// gcPlan is GCPlan and how many terminal job documents it skipped as
// undecodable (kernel.JobPage): their git state is left alone.
func (c *Service) gcPlan(ctx context.Context) ([]protocol.GCRequest, int, error) {
	done, skipped, err := c.k.ScanJobs(ctx, store.Query{Where: []store.Cond{store.In("stage", terminalStages...)}})
	if err != nil {
		return nil, 0, err
	}
	type productRepo struct{ product, repo string }
	byRepo := map[productRepo][]string{}
	productsOf := map[string][]string{} // repo -> products with terminal jobs in it
	for _, j := range done {
		k := productRepo{j.ProductID, j.Repo}
		if len(byRepo[k]) == 0 {
			productsOf[j.Repo] = append(productsOf[j.Repo], j.ProductID)
		}
		byRepo[k] = append(byRepo[k], j.ID)
	}
	factories, err := c.ListFactories(ctx, "")
	if err != nil {
		return nil, 0, err
	}
	var plan []protocol.GCRequest
	for _, f := range factories {
		req := protocol.GCRequest{FactoryID: f.ID, Repos: map[string][]string{}}
		for _, r := range f.Repos {
			var ids []string
			for _, p := range productsOf[r] {
				if f.Serves(p) {
					ids = append(ids, byRepo[productRepo{p, r}]...)
				}
			}
			if len(ids) > 0 {
				req.Repos[r] = slices.Sorted(slices.Values(ids))
			}
		}
		if len(req.Repos) > 0 {
			plan = append(plan, req)
		}
	}
	return plan, skipped, nil
}

// GCSweep sends each factory its GC request when the transport can carry
// one, and returns how many requests it sent. Without such a transport it
// sends none and factories clean up on their own at start and after each
// job.
func (c *Service) GCSweep(ctx context.Context, gp GCPublisher) (int, error) {
	if gp == nil {
		return 0, nil
	}
	// No job ended since the last sweep that sent its whole plan: every
	// request would repeat one already sent (factories also clean up on
	// their own at start and after each job). See ledger.go.
	skip, view := c.k.Quiet(ctx, kernel.SweepGC)
	if skip {
		return 0, nil
	}
	plan, skipped, err := c.gcPlan(ctx)
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
	if skipped == 0 {
		// A plan that skipped a job is not known to be whole: the next
		// tick looks again (and logs the job again) rather than go quiet.
		c.k.MarkQuiet(ctx, view)
	}
	return n, nil
}
