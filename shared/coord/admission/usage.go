package admission

import (
	"context"
	"fmt"

	"github.com/gigafactory/fleet/shared/coord/internal/kernel"
	"github.com/gigafactory/fleet/shared/fleet"
)

// UsageRequest is a holder's report of its run's usage so far.
type UsageRequest struct {
	LeaseEpoch int64
	// Engine names the engine running the job, when the holder says.
	Engine string
	Usage  fleet.Usage
	// Facts are what a structured engine said of the run so far.
	Facts fleet.EngineFacts
}

// maxEngineName bounds the engine name a holder reports.
const maxEngineName = 64

// ValidateReport checks the parts of a run report a holder sent.
func ValidateReport(u *fleet.Usage, head string, diff *fleet.DiffStat, facts fleet.EngineFacts) error {
	if err := facts.Validate(); err != nil {
		return err
	}
	if u != nil {
		if err := u.Validate("usage"); err != nil {
			return err
		}
	}
	if head != "" {
		if err := fleet.ValidateName("head", head); err != nil {
			return err
		}
	}
	if diff != nil {
		if err := diff.Validate("diff"); err != nil {
			return err
		}
	}
	return nil
}

// MergeReport folds r into the job's report of the same run (a report of
// an older run is replaced). It reports whether anything changed.
func MergeReport(j *fleet.Job, r fleet.RunReport) bool {
	cur := j.ReportFor(r.LeaseEpoch)
	next := fleet.RunReport{LeaseEpoch: r.LeaseEpoch}
	if cur != nil {
		next = *cur
		if next.Diff != nil {
			d := *next.Diff
			next.Diff = &d
		}
	}
	next.Merge(r)
	if cur != nil && sameReport(*cur, next) {
		return false
	}
	j.Report = &next
	return true
}

func sameReport(a, b fleet.RunReport) bool {
	if (a.Diff == nil) != (b.Diff == nil) || (a.Diff != nil && *a.Diff != *b.Diff) {
		return false
	}
	return a.LeaseEpoch == b.LeaseEpoch && a.Engine == b.Engine && a.Usage == b.Usage && a.Head == b.Head &&
		a.EngineFacts.Equal(b.EngineFacts)
}

// ReportUsage records the holder's cumulative usage of its run, fenced by
// the lease epoch. Figures merge by maximum (fleet.Usage.Max): a report
// retried, or overtaken by a newer one, changes nothing, and a lower
// figure never lowers what was recorded. A report that changes the
// figures appends a usage event; one that changes nothing writes nothing.
// When the run's usage passes the estimate reserved for it on the
// product's budget, the reservation grows to match, so admission counts
// what the run has really spent so far.
func (c *Service) ReportUsage(ctx context.Context, factoryID, productID, jobID string, req UsageRequest) (*fleet.Job, error) {
	if err := req.Usage.Validate(""); err != nil {
		return nil, err
	}
	if err := req.Facts.Validate(); err != nil {
		return nil, err
	}
	if req.Engine != "" {
		if err := fleet.ValidateName("engine", req.Engine); err != nil {
			return nil, err
		}
		if len(req.Engine) > maxEngineName {
			return nil, fleet.Invalid("engine", "at most %d characters", maxEngineName)
		}
	}
	changed := false
	j, err := c.k.MutateJob(ctx, productID, jobID, func(j *fleet.Job) error {
		changed = false
		if err := j.CheckFence(factoryID, req.LeaseEpoch); err != nil {
			return err
		}
		if !MergeReport(j, fleet.RunReport{LeaseEpoch: req.LeaseEpoch, Engine: req.Engine, Usage: req.Usage, EngineFacts: req.Facts}) {
			return kernel.ErrNoChange
		}
		changed = true
		j.UpdatedAt = c.k.Now()
		u := j.Report.Usage
		return c.k.RecordEvent(ctx, j, fleet.Event{Type: fleet.EventUsage, Actor: fleet.ActorFactory, ActorID: factoryID,
			Message: fmt.Sprintf("usage so far: %.4f USD, %d input and %d output tokens", u.USD, u.InputTokens, u.OutputTokens)})
	})
	if err != nil || !changed {
		return j, err
	}
	ctx = context.WithoutCancel(ctx)
	u := j.Report.Usage
	if took, known := j.AdmittedFor(req.LeaseEpoch); !known || took.Reservation {
		c.growReservation(ctx, j.ProductID, j.ID, req.LeaseEpoch, u.USD)
	}
	return j, nil
}
