package coord

import (
	"context"

	"github.com/gigafactory/fleet/shared/coord/admission"
	"github.com/gigafactory/fleet/shared/fleet"
)

// Budgets, seat caps and usage reports live in coord/admission; these are
// their façade.

// PutBudget sets a product's budget; a change that may make room lets held
// jobs flow at once.
func (c *Coordinator) PutBudget(ctx context.Context, productID string, req admission.BudgetRequest) (*admission.BudgetView, error) {
	return c.admission.PutBudget(ctx, productID, req)
}

// GetBudget returns a product's budget.
func (c *Coordinator) GetBudget(ctx context.Context, productID string) (*admission.BudgetView, error) {
	return c.admission.GetBudget(ctx, productID)
}

// GetBurndown returns the period's burndown and its forecast.
func (c *Coordinator) GetBurndown(ctx context.Context, productID string) (*admission.Burndown, error) {
	return c.admission.GetBurndown(ctx, productID)
}

// PauseBudget stops assignments for the product until it is resumed.
func (c *Coordinator) PauseBudget(ctx context.Context, productID, reason string) (*admission.BudgetView, error) {
	return c.admission.PauseBudget(ctx, productID, reason)
}

// ResumeBudget lifts a pause and lets the jobs it held flow at once.
func (c *Coordinator) ResumeBudget(ctx context.Context, productID string) (*admission.BudgetView, error) {
	return c.admission.ResumeBudget(ctx, productID)
}

// ReportUsage records the holder's cumulative usage of its run, fenced by
// the lease epoch.
func (c *Coordinator) ReportUsage(ctx context.Context, factoryID, productID, jobID string, req admission.UsageRequest) (*fleet.Job, error) {
	return c.admission.ReportUsage(ctx, factoryID, productID, jobID, req)
}
