package httpapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/gigafactory/fleet/shared/api"
	"github.com/gigafactory/fleet/shared/coord"
	"github.com/gigafactory/fleet/shared/coord/dag"
	"github.com/gigafactory/fleet/shared/fleet"
)

// actorOf is who p acts as on a job: its holder (a factory, fenced by the
// leaseEpoch it sends) or an operator.
func actorOf(p *principal) fleet.Actor {
	if p.isFactory() {
		return fleet.ActorFactory
	}
	return fleet.ActorOperator
}

func (s *server) postChildren(w http.ResponseWriter, r *http.Request, p *principal) error {
	id, err := pathName(r, "id")
	if err != nil {
		return err
	}
	var req api.ChildrenRequest
	if err := s.decodeBody(w, r, &req, true); err != nil {
		return err
	}
	product, err := s.jobProduct(r, p, id, "")
	if err != nil {
		return err
	}
	if req.Children == nil {
		return required("children", "a list of child manifests")
	}
	if len(req.Children) > fleet.MaxChildrenPerRequest {
		return fleet.Invalid("children", "has %d entries, at most %d allowed per request", len(req.Children), fleet.MaxChildrenPerRequest)
	}
	manifests := make([][]byte, len(req.Children))
	for i, raw := range req.Children {
		if manifests[i], err = childManifest(fmt.Sprintf("children[%d]", i), raw); err != nil {
			return err
		}
	}
	kids, created, err := s.coord.PostChildren(r.Context(), product, id, dag.ChildrenRequest{
		Actor: actorOf(p), ActorID: p.id, LeaseEpoch: req.LeaseEpoch, Manifests: manifests})
	if err != nil {
		return err
	}
	status := http.StatusCreated
	if !created {
		status = http.StatusOK
	}
	return writeJSON(w, status, api.List[*fleet.Job]{Items: kids})
}

// childManifest reads one entry of children: a string, or an object with
// exactly a manifest string.
func childManifest(field string, raw json.RawMessage) ([]byte, error) {
	trimmed := bytes.TrimSpace(raw)
	if len(trimmed) > 0 && trimmed[0] == '"' {
		var m string
		if err := json.Unmarshal(trimmed, &m); err != nil {
			return nil, fleet.Invalid(field, "is not a valid JSON string")
		}
		return []byte(m), nil
	}
	if len(trimmed) == 0 || trimmed[0] != '{' {
		return nil, fleet.Invalid(field, `must be a manifest string or {"manifest": "..."}`)
	}
	var sub api.SubmitRequest
	if err := decodeStrict(trimmed, &sub, true); err != nil {
		return nil, prefixed(field, err)
	}
	if sub.Manifest == nil {
		return nil, required(field+".manifest", "the Markdown manifest as a string")
	}
	return []byte(*sub.Manifest), nil
}

// prefixed puts a decoding error's field under prefix.
func prefixed(prefix string, err error) error {
	var fe *fleet.Error
	if !errors.As(err, &fe) {
		return err
	}
	out := *fe
	if out.Field == "" {
		out.Field = prefix
	} else {
		out.Field = prefix + "." + out.Field
	}
	return &out
}

func (s *server) jobDAG(w http.ResponseWriter, r *http.Request, p *principal) error {
	id, product, err := s.pathHeldJob(r, p)
	if err != nil {
		return err
	}
	d, err := s.coord.DAG(r.Context(), product, id)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, d)
}

func (s *server) requestReview(w http.ResponseWriter, r *http.Request, p *principal) error {
	id, err := pathName(r, "id")
	if err != nil {
		return err
	}
	var req api.ReviewRequest
	if err := s.decodeBody(w, r, &req, true); err != nil {
		return err
	}
	product, err := s.jobProduct(r, p, id, "")
	if err != nil {
		return err
	}
	j, err := s.coord.RequestReview(r.Context(), product, id, coord.ReviewRequest{Actor: actorOf(p), ActorID: p.id, LeaseEpoch: req.LeaseEpoch,
		Reviewers: req.Reviewers, Quorum: req.Quorum, Head: req.Head})
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, j)
}

func (s *server) vote(w http.ResponseWriter, r *http.Request, p *principal) error {
	id, err := pathName(r, "id")
	if err != nil {
		return err
	}
	var req api.VoteRequest
	if err := s.decodeBody(w, r, &req, true); err != nil {
		return err
	}
	if req.Approve == nil {
		return required("approve", "true to approve the head, false to reject it")
	}
	if req.Head == nil {
		return required("head", "the review.head the vote is about")
	}
	product, err := s.jobProduct(r, p, id, "")
	if err != nil {
		return err
	}
	// The voter is the operator's configured name (FLEET_OPERATOR_TOKEN
	// name:token), never something the body says.
	j, err := s.coord.Vote(r.Context(), product, id, coord.VoteRequest{Reviewer: p.id, Approve: *req.Approve, Comment: req.Comment, Head: *req.Head})
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, j)
}
