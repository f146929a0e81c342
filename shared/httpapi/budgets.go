package httpapi

import (
	"net/http"

	"github.com/gigafactory/fleet/shared/coord/admission"
	"github.com/gigafactory/fleet/shared/fleet"
)

// usageRequest is a holder's cumulative usage report of its run.
type usageRequest struct {
	LeaseEpoch   *int64   `json:"leaseEpoch"`
	USD          *float64 `json:"usd"`
	InputTokens  *int64   `json:"inputTokens"`
	OutputTokens *int64   `json:"outputTokens"`
	// Engine names the engine running the job (optional).
	Engine string `json:"engine"`
}

// budgetRequest is an operator's PUT of a product's budget.
type budgetRequest struct {
	CeilingUSD    *float64 `json:"ceilingUsd"`
	Period        string   `json:"period"`
	AlertAt       *float64 `json:"alertAt"`
	AutoPause     *bool    `json:"autoPause"`
	DefaultJobUSD *float64 `json:"defaultJobUsd"`
}

// pauseRequest pauses a product; the reason is for people.
type pauseRequest struct {
	Reason string `json:"reason"`
}

func (s *server) reportUsage(w http.ResponseWriter, r *http.Request, p *principal) error {
	id, err := pathName(r, "id")
	if err != nil {
		return err
	}
	var req usageRequest
	if err := s.decodeBody(w, r, &req, true); err != nil {
		return err
	}
	if req.LeaseEpoch == nil {
		return required("leaseEpoch", "the leaseEpoch the claim returned")
	}
	if req.USD == nil {
		return required("usd", "the run's cost so far in USD, cumulative")
	}
	u := fleet.Usage{USD: *req.USD}
	if req.InputTokens != nil {
		u.InputTokens = *req.InputTokens
	}
	if req.OutputTokens != nil {
		u.OutputTokens = *req.OutputTokens
	}
	product, err := s.jobProduct(r, p, id, "")
	if err != nil {
		return err
	}
	j, err := s.coord.ReportUsage(r.Context(), p.id, product, id, admission.UsageRequest{LeaseEpoch: *req.LeaseEpoch, Engine: req.Engine, Usage: u})
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, j)
}

func (s *server) putBudget(w http.ResponseWriter, r *http.Request, p *principal) error {
	id, err := scopedProduct(r, p)
	if err != nil {
		return err
	}
	var req budgetRequest
	if err := s.decodeBody(w, r, &req, true); err != nil {
		return err
	}
	b, err := s.coord.PutBudget(r.Context(), id, admission.BudgetRequest{CeilingUSD: req.CeilingUSD, Period: req.Period,
		AlertAt: req.AlertAt, AutoPause: req.AutoPause, DefaultJobUSD: req.DefaultJobUSD})
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, b)
}

func (s *server) getBudget(w http.ResponseWriter, r *http.Request, p *principal) error {
	id, err := scopedProduct(r, p)
	if err != nil {
		return err
	}
	b, err := s.coord.GetBudget(r.Context(), id)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, b)
}

func (s *server) burndown(w http.ResponseWriter, r *http.Request, p *principal) error {
	id, err := scopedProduct(r, p)
	if err != nil {
		return err
	}
	b, err := s.coord.GetBurndown(r.Context(), id)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, b)
}

func (s *server) pauseBudget(w http.ResponseWriter, r *http.Request, p *principal) error {
	id, err := scopedProduct(r, p)
	if err != nil {
		return err
	}
	var req pauseRequest
	if err := s.decodeBody(w, r, &req, false); err != nil {
		return err
	}
	b, err := s.coord.PauseBudget(r.Context(), id, req.Reason)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, b)
}

func (s *server) resumeBudget(w http.ResponseWriter, r *http.Request, p *principal) error {
	id, err := scopedProduct(r, p)
	if err != nil {
		return err
	}
	if err := s.decodeBody(w, r, &struct{}{}, false); err != nil {
		return err
	}
	b, err := s.coord.ResumeBudget(r.Context(), id)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, b)
}
