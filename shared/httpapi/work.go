package httpapi

import (
	"bytes"
	"net/http"

	"github.com/gigafactory/fleet/shared/api"
	"github.com/gigafactory/fleet/shared/coord"
	"github.com/gigafactory/fleet/shared/fleet"
)

// The worker routes. Each acts as the factory whose token it carries; the
// lease epoch fences it, so a stale or foreign worker gets 409 fenced and
// changes nothing.

// headerIdempotencyKey carries a claim's request id as a header instead
// of requestId (named here for the OpenAPI document).
const headerIdempotencyKey = api.HeaderIdempotencyKey

// claim is the poll transport. It draws from every product the token is
// scoped to; an x-product-id is only checked against that scope. The same
// request id again answers the lease its first try took.
func (s *server) claim(w http.ResponseWriter, r *http.Request, p *principal) error {
	var req api.ClaimRequest
	if err := s.decodeBody(w, r, &req, false); err != nil {
		return err
	}
	if key := r.Header.Get(headerIdempotencyKey); key != "" {
		if req.RequestID != "" && req.RequestID != key {
			return fleet.Invalid("requestId", "differs from the %s header; send one id, or the same in both", headerIdempotencyKey)
		}
		req.RequestID = key
	}
	c, err := s.coord.Claim(r.Context(), coord.ClaimRequest{Token: p.token, RequestID: req.RequestID})
	if err != nil {
		return err
	}
	if c == nil {
		return noContent(w)
	}
	return writeJSON(w, http.StatusOK, c)
}

func (s *server) accept(w http.ResponseWriter, r *http.Request, p *principal) error {
	var req api.AcceptRequest
	if err := s.decodeBody(w, r, &req, true); err != nil {
		return err
	}
	if err := fleet.ValidateName("jobId", req.JobID); err != nil {
		return err
	}
	if req.DispatchEpoch == nil {
		return required("dispatchEpoch", "the dispatchEpoch of the dispatch message")
	}
	product, err := s.jobProduct(r, p, req.JobID, req.ProductID)
	if err != nil {
		return err
	}
	c, err := s.coord.Accept(r.Context(), p.id, product, req.JobID, *req.DispatchEpoch)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, c)
}

func (s *server) fail(w http.ResponseWriter, r *http.Request, p *principal) error {
	body, err := s.readJSONBody(w, r)
	if err != nil {
		return err
	}
	// The reason is an engine's output, which may hold bytes that are not
	// UTF-8. A failure report is never refused for its reason (coord stores
	// it escaped): such bytes become U+FFFD instead of failing the body.
	var req api.FailRequest
	if err := decodeStrict(bytes.ToValidUTF8(body, []byte("\uFFFD")), &req, true); err != nil {
		return err
	}
	if err := fleet.ValidateName("jobId", req.JobID); err != nil {
		return err
	}
	if req.LeaseEpoch == nil {
		return required("leaseEpoch", "the leaseEpoch the claim returned")
	}
	if req.Reason == nil {
		// An absent field is a malformed report; any text in it is taken.
		return required("reason", "what went wrong; any text, stored escaped")
	}
	if req.Retryable == nil {
		// No default: guessing wrong either retries a hopeless job or
		// fails one that would have passed.
		return required("retryable", "true to retry the job, false to fail it for good")
	}
	kind, err := fleet.ParseFailureKind("kind", string(req.Kind))
	if err != nil {
		return err
	}
	product, err := s.jobProduct(r, p, req.JobID, req.ProductID)
	if err != nil {
		return err
	}
	j, err := s.coord.Fail(r.Context(), p.id, product, req.JobID,
		coord.FailRequest{LeaseEpoch: *req.LeaseEpoch, Reason: *req.Reason, Retryable: *req.Retryable, Kind: kind,
			Usage: req.Usage, Engine: req.EngineFacts, Cooldowns: req.Cooldowns})
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, j)
}

func (s *server) renewLease(w http.ResponseWriter, r *http.Request, p *principal) error {
	id, err := pathName(r, "id")
	if err != nil {
		return err
	}
	var req api.LeaseRequest
	if err := s.decodeBody(w, r, &req, true); err != nil {
		return err
	}
	if req.LeaseEpoch == nil {
		return required("leaseEpoch", "the leaseEpoch the claim returned")
	}
	product, err := s.jobProduct(r, p, id, "")
	if err != nil {
		return err
	}
	ren, err := s.coord.Renew(r.Context(), p.id, product, id, *req.LeaseEpoch)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, ren)
}

func (s *server) releaseLease(w http.ResponseWriter, r *http.Request, p *principal) error {
	id, err := pathName(r, "id")
	if err != nil {
		return err
	}
	var req api.ReleaseRequest
	if err := s.decodeBody(w, r, &req, true); err != nil {
		return err
	}
	if req.LeaseEpoch == nil {
		return required("leaseEpoch", "the leaseEpoch the claim returned")
	}
	var outcome fleet.ReleaseOutcome
	if req.Outcome != nil {
		if outcome, err = fleet.ParseReleaseOutcome("outcome", string(*req.Outcome)); err != nil {
			return err
		}
	}
	product, err := s.jobProduct(r, p, id, "")
	if err != nil {
		return err
	}
	j, err := s.coord.ReleaseWith(r.Context(), p.id, product, id,
		coord.ReleaseRequest{LeaseEpoch: *req.LeaseEpoch, Outcome: outcome, Checkpoint: req.Checkpoint})
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, j)
}
