package coord

import (
	"cmp"
	"context"
	"slices"
	"strings"
	"time"

	"github.com/gigafactory/fleet/shared/api/view"
	"github.com/gigafactory/fleet/shared/coord/dag"
	"github.com/gigafactory/fleet/shared/coord/pulls"
	"github.com/gigafactory/fleet/shared/store"

	"github.com/gigafactory/fleet/shared/fleet"
	"github.com/gigafactory/fleet/shared/schedule"
)

// StarvationAge is how long a queued job may wait before it is reported as
// starving: the scheduler's own window, after which its starvation penalty
// has aged away and the job outranks newer ones.
const StarvationAge = schedule.StarvationWindow

// Metrics is the fleet at a glance.
type Metrics = view.Metrics

// FactoryMetrics rolls up factory health and seats.
type FactoryMetrics = view.FactoryMetrics

// DeadLetterAlertWindow is how long a dead-lettered or failed job stays an
// alert: long enough for an operator to see it the next working day; the
// job itself stays where it is until requeued.
const DeadLetterAlertWindow = 24 * time.Hour

// cancelAlert reports a cancel its holder has not acknowledged yet: a
// warning within the grace, critical once the reaper is overdue to force it.
func (c *Coordinator) cancelAlert(j *fleet.Job, now time.Time) fleet.Alert {
	deadline := j.StopRequestedAt.Add(c.cfg.CancelGrace)
	waited := now.Sub(j.StopRequestedAt).Round(time.Second).String()
	a := fleet.Alert{Kind: fleet.AlertCancelUnacknowledged, Severity: fleet.SeverityWarning,
		Subject: j.ProductID + "/" + j.ID, Since: j.StopRequestedAt,
		Message: "cancel not acknowledged by " + j.HolderFactoryID + " for " + waited + "; forced at " + deadline.Format(time.RFC3339)}
	if !now.Before(deadline) {
		a.Severity = fleet.SeverityCritical
		a.Message = "cancel not acknowledged by " + j.HolderFactoryID + " for " + waited + ", past the grace; the reaper revokes the lease at its next tick"
	}
	return a
}

// StarvingJob is a queued job waiting past StarvationAge.
type StarvingJob = view.StarvingJob

// activeStages are the stages Metrics counts: terminal jobs only grow, and
// counting them would read the whole history on every scrape.
var activeStages = []string{string(fleet.StageQueued), string(fleet.StageBlocked), string(fleet.StageAssigned),
	string(fleet.StageBuilding), string(fleet.StageReview), string(fleet.StageTesting)}

// MetricsSource reports one adapter's figures for Metrics. It is given the
// factories Metrics already read, so a per-factory figure (a subscription's
// depth) costs no second listing.
type MetricsSource func(ctx context.Context, factories []*fleet.Factory) (any, error)

// Metrics computes the fleet view. With productID set, jobs and factories of
// that product only.
func (c *Coordinator) Metrics(ctx context.Context, productID string) (*Metrics, error) {
	now := c.k.Now()
	m := &Metrics{At: now, Jobs: map[string]int{}, Starving: []StarvingJob{}, Alerts: []fleet.Alert{},
		Factories: FactoryMetrics{ByHealth: map[string]int{}}}
	stats := c.Stats()
	m.Coord = &stats
	factories, err := c.ListFactories(ctx, productID)
	if err != nil {
		return nil, err
	}
	for _, f := range factories {
		m.Factories.Total++
		m.Factories.ByHealth[string(f.Health)]++
		m.Factories.Seats += f.SeatLimit
		m.Factories.Load += f.Load
	}
	if m.Factories.Seats > 0 {
		m.Factories.Utilization = float64(m.Factories.Load) / float64(m.Factories.Seats)
	}
	q := store.Query{PartitionKey: productID, Where: []store.Cond{store.In("stage", activeStages...)}}
	// Passing over a job that does not decode (alerted on below).
	jobs, _, err := c.k.ScanJobs(ctx, q)
	if err != nil {
		return nil, err
	}
	for _, st := range activeStages {
		m.Jobs[st] = 0
	}
	// Oldest first, so the starving list leads with the longest wait.
	slices.SortFunc(jobs, func(a, b *fleet.Job) int {
		return cmp.Or(a.QueuedAt.Compare(b.QueuedAt), strings.Compare(a.ID, b.ID))
	})
	// Dependencies of blocked jobs, each read once per scrape.
	depStages := map[string]fleet.Stage{}
	lookup := func(ctx context.Context, productID, id string) (fleet.Stage, error) {
		if st, ok := depStages[productID+"/"+id]; ok {
			return st, nil
		}
		st, err := c.dag.Stage(ctx, productID, id)
		if err == nil {
			depStages[productID+"/"+id] = st
		}
		return st, err
	}
	var blockedOnFailed []fleet.Alert
	starvingRepo := map[string]bool{} // product/repo already alerted
	for _, j := range jobs {
		m.Jobs[string(j.Stage)]++
		if j.Stage.Leased() && j.CancelRequested {
			m.Alerts = append(m.Alerts, c.cancelAlert(j, now))
			continue
		}
		if j.Stage == fleet.StageBlocked {
			// Normally failed at once when the dependency ends; one still
			// blocked was missed (a crash) and waits for the sweep.
			if v, why, err := c.dag.WaitState(ctx, j, lookup); err == nil && v == dag.Broken {
				blockedOnFailed = append(blockedOnFailed, fleet.Alert{Kind: fleet.AlertBlockedOnFailed,
					Severity: fleet.SeverityWarning, Subject: j.ProductID + "/" + j.ID, Since: j.UpdatedAt,
					Message: "blocked on a dependency or child that ended unshipped (" + why + "); the redispatch sweep fails it with dependency_failed"})
			}
			continue
		}
		m.Alerts = append(m.Alerts, pulls.Alerts(j)...)
		if j.Stage != fleet.StageQueued {
			continue
		}
		if why, ok := schedule.NoFactory(j, factories, now, c.cfg.Weights); ok {
			// Said from its submit on, not once it starves: waiting will
			// not help, the fleet or the job must change. Judged on the
			// factories read above, whatever the dispatch transport.
			m.Alerts = append(m.Alerts, fleet.Alert{Kind: fleet.AlertNoFactory, Severity: fleet.SeverityWarning,
				Subject: j.ProductID + "/" + j.ID, Since: j.QueuedAt,
				Message: "no enrolled factory can run job " + j.ID + " (" + why + "); enroll one that can, or change the job"})
		}
		waited := now.Sub(j.QueuedAt)
		if waited < StarvationAge {
			continue
		}
		m.Starving = append(m.Starving, StarvingJob{JobID: j.ID, ProductID: j.ProductID,
			WaitingFor: waited.Round(time.Second).String(), Reason: j.Dispatch.Unroutable})
		// Jobs are oldest first: the first starving job of a repo is its
		// oldest, and the one alert for that product and repo.
		if subject := j.ProductID + "/" + j.Repo; !starvingRepo[subject] {
			starvingRepo[subject] = true
			msg := "job " + j.ID + " has been queued for " + waited.Round(time.Second).String()
			if j.Dispatch.Unroutable != "" {
				msg += ": " + j.Dispatch.Unroutable
			}
			m.Alerts = append(m.Alerts, fleet.Alert{Kind: fleet.AlertStarving, Severity: fleet.SeverityWarning,
				Subject: subject, Since: j.QueuedAt, Message: msg})
		}
	}
	m.Alerts = append(m.Alerts, blockedOnFailed...)
	// Jobs that ended badly within the window: the bound on updatedAt keeps
	// the read to a day's failures, however long the history.
	ended, _, err := c.k.ScanJobs(ctx, store.Query{PartitionKey: productID, Where: []store.Cond{
		store.In("stage", string(fleet.StageDeadLetter), string(fleet.StageFailed)), store.Since("updatedAt", now.Add(-DeadLetterAlertWindow))}})
	if err != nil {
		return nil, err
	}
	slices.SortFunc(ended, func(a, b *fleet.Job) int {
		return cmp.Or(a.UpdatedAt.Compare(b.UpdatedAt), strings.Compare(a.ID, b.ID))
	})
	for _, j := range ended {
		if now.Sub(j.UpdatedAt) >= DeadLetterAlertWindow {
			continue
		}
		m.Alerts = append(m.Alerts, fleet.EndedAlert(j))
	}
	for name, src := range c.metricSources {
		if m.Adapters == nil {
			m.Adapters = map[string]any{}
		}
		v, err := src(ctx, factories)
		if err != nil {
			v = map[string]string{"error": err.Error()}
		}
		m.Adapters[name] = v
	}
	for _, f := range factories {
		if f.Health != fleet.HealthStale && f.Health != fleet.HealthDown {
			continue
		}
		since := f.LastHeartbeatAt
		if since.IsZero() {
			since = f.EnrolledAt
		}
		sev, msg := fleet.SeverityWarning, "silent for "+now.Sub(since).Round(time.Second).String()+": stale, not offered new work"
		if f.Health == fleet.HealthDown {
			sev, msg = fleet.SeverityCritical, "silent for "+now.Sub(since).Round(time.Second).String()+": down, its leases are reaped as they expire"
		}
		m.Alerts = append(m.Alerts, fleet.Alert{Kind: fleet.AlertStaleFactory, Severity: sev, Subject: f.ID, Since: since, Message: msg})
	}
	budgetAlerts, err := c.admission.Alerts(ctx, productID)
	if err != nil {
		return nil, err
	}
	m.Alerts = append(m.Alerts, budgetAlerts...)
	// Fleet-wide only: the document named may be any product's.
	if a, ok := c.k.Counters.UndecodableAlert(now, DeadLetterAlertWindow); ok && productID == "" {
		m.Alerts = append(m.Alerts, a)
	}
	return m, nil
}
