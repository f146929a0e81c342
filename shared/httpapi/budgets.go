package httpapi

import (
	"net/http"

	"github.com/gigafactory/fleet/shared/api"
	"github.com/gigafactory/fleet/shared/coord/admission"
	"github.com/gigafactory/fleet/shared/fleet"
)

func (s *server) reportUsage(w http.ResponseWriter, r *http.Request, p *principal) error {
	id, err := pathName(r, "id")
	if err != nil {
		return err
	}
	var req api.UsageRequest
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
	if req.CacheReadTokens != nil {
		u.CacheReadTokens = *req.CacheReadTokens
	}
	if req.CacheWriteTokens != nil {
		u.CacheWriteTokens = *req.CacheWriteTokens
	}
	product, err := s.jobProduct(r, p, id, "")
	if err != nil {
		return err
	}
	j, err := s.coord.ReportUsage(r.Context(), p.id, product, id, admission.UsageRequest{LeaseEpoch: *req.LeaseEpoch, Engine: req.Engine, Usage: u, Facts: req.EngineFacts})
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
	var req api.BudgetRequest
	if err := s.decodeBody(w, r, &req, true); err != nil {
		return err
	}
	b, err := s.coord.PutBudget(r.Context(), id, admission.BudgetRequest{CeilingUSD: req.CeilingUSD, Period: string(req.Period),
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
	var req api.PauseRequest
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
