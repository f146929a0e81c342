package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"math"
	"net/http"
	"strings"

	"github.com/gigafactory/fleet/shared/api"
	"github.com/gigafactory/fleet/shared/coord"
	"github.com/gigafactory/fleet/shared/coord/catalog"
	"github.com/gigafactory/fleet/shared/coord/live"
	"github.com/gigafactory/fleet/shared/fleet"
	"github.com/gigafactory/fleet/shared/store"
)

// Job list paging.
const (
	defaultJobPage = 50
	maxJobPage     = 500
	maxCursorLen   = 1024
	// maxJobPageBytes bounds a page's jobs, encoded: a job may carry a
	// manifest of 1 MiB, so 500 of them would be half a gigabyte. Half of
	// what api.Client reads of an answer.
	maxJobPageBytes = 4 << 20
)

// Event list paging: a client pages with after=<last seq it has>.
const maxEventPage = 500

// productOf returns the product r addresses: x-product-id (authorize has
// checked it against p's scope), else p's only product, else "".
func productOf(r *http.Request, p *principal) string {
	if prod := r.Header.Get(headerProduct); prod != "" {
		return prod
	}
	prod, _ := p.only()
	return prod
}

// needProduct is productOf for routes that cannot work across products.
func needProduct(r *http.Request, p *principal) (string, error) {
	if prod := productOf(r, p); prod != "" {
		return prod, nil
	}
	return "", fleet.Invalid(productField, "is required: name the product this request is for")
}

// pathJob reads the {id} of a job route and the product it is in, checked
// against the caller's scope: the preamble of every job-scoped route.
func (s *server) pathJob(r *http.Request, p *principal) (id, product string, err error) {
	if id, err = pathName(r, "id"); err != nil {
		return "", "", err
	}
	product, err = s.jobProduct(r, p, id, "")
	return id, product, err
}

// pathHeldJob is pathJob for the reads a factory may make only of a job it
// holds now (heldJobProduct).
func (s *server) pathHeldJob(r *http.Request, p *principal) (id, product string, err error) {
	if id, err = pathName(r, "id"); err != nil {
		return "", "", err
	}
	product, err = s.heldJobProduct(r, p, id)
	return id, product, err
}

// heldJobProduct is jobProduct under the rule of API.md "Auth" for a
// factory's reads: the runs, events (polled or streamed), explanation, DAG
// and artifacts of a job only while it holds the job (they are another
// run's work otherwise, possibly another factory's, and a stream of a job
// is what costs). The job document itself stays readable in its products:
// the factory asks about jobs it no longer holds (whether a branch's job
// is over, and whether a lost answer was applied). A factory's job is read
// once, for its product and its holder alike; an operator is bound by its
// product scope alone.
func (s *server) heldJobProduct(r *http.Request, p *principal, id string) (string, error) {
	if !p.isFactory() {
		return s.jobProduct(r, p, id, "")
	}
	j, err := s.coord.GetJob(r.Context(), productOf(r, p), id)
	if err != nil {
		return "", err
	}
	if !p.allows(j.ProductID) {
		return "", forbidden("job %s belongs to a product outside this token's scope", id)
	}
	return j.ProductID, holds(p, j)
}

// holderRead applies heldJobProduct's rule to job id of product, found
// without reading the job (an artifact names both).
func (s *server) holderRead(r *http.Request, p *principal, product, id string) error {
	if !p.isFactory() {
		return nil
	}
	j, err := s.coord.GetJob(r.Context(), product, id)
	if err != nil {
		return err
	}
	return holds(p, j)
}

// holds is nil when factory p holds j, else 403 forbidden, as for any
// token acting outside what it covers.
func holds(p *principal, j *fleet.Job) error {
	if j.HolderFactoryID != p.id {
		return forbidden("job %s is not held by factory %s: a factory reads the runs, events, artifacts, explanation and DAG only of the jobs it holds", j.ID, p.id)
	}
	return nil
}

// jobProduct finds the product of job id on p's behalf, in the order
// x-product-id, the product the body names (hint), p's only product, and
// last a lookup of the job across products, whose product must then be in
// p's scope.
func (s *server) jobProduct(r *http.Request, p *principal, id, hint string) (string, error) {
	if hint != "" {
		if err := fleet.ValidateName("productId", hint); err != nil {
			return "", err
		}
		if h := r.Header.Get(headerProduct); h != "" && h != hint {
			return "", fleet.Invalid("productId", "%s does not match x-product-id %s", hint, h)
		}
		if !p.allows(hint) {
			return "", forbidden("product %s is outside this token's scope", hint)
		}
		return hint, nil
	}
	if prod := productOf(r, p); prod != "" {
		return prod, nil
	}
	j, err := s.coord.GetJob(r.Context(), "", id)
	if err != nil {
		return "", err
	}
	if !p.allows(j.ProductID) {
		return "", forbidden("job %s belongs to a product outside this token's scope", id)
	}
	return j.ProductID, nil
}

func (s *server) submitJob(w http.ResponseWriter, r *http.Request, p *principal) error {
	product := productOf(r, p) // never "": the route needsProduct
	manifest, err := s.readManifest(w, r)
	if err != nil {
		return err
	}
	j, created, err := s.coord.Submit(r.Context(), product, manifest)
	if err != nil {
		return err
	}
	out := api.Submitted{Job: *j, Warnings: s.coord.SubmitWarnings(r.Context(), j)}
	if !created {
		return writeJSON(w, http.StatusOK, out)
	}
	w.Header().Set("Location", apiPrefix+"/fleet/jobs/"+j.ID)
	return writeJSON(w, http.StatusCreated, out)
}

// readManifest reads a manifest sent raw as Markdown or wrapped in JSON.
func (s *server) readManifest(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	mt, err := mediaType(r)
	if err != nil {
		return nil, err
	}
	switch {
	case mt == "text/markdown" || mt == "text/x-markdown":
		body, err := s.readBody(w, r)
		if err != nil {
			return nil, err
		}
		if len(bytes.TrimSpace(body)) == 0 {
			return nil, required("manifest", "the request body is empty")
		}
		return body, nil
	case isJSON(mt):
		var req api.SubmitRequest
		if err := s.decodeBody(w, r, &req, true); err != nil {
			return nil, err
		}
		if req.Manifest == nil {
			return nil, required("manifest", "the Markdown manifest as a string")
		}
		return []byte(*req.Manifest), nil
	case mt == "":
		// Unlike the JSON-only routes, the body here could be either kind.
		return nil, fleet.Invalid(contentTypeField, "is required: text/markdown for a raw manifest, application/json for {\"manifest\": ...}")
	}
	return nil, fleet.Invalid(contentTypeField, "%s is not accepted here; send text/markdown or application/json", mt)
}

func (s *server) listJobs(w http.ResponseWriter, r *http.Request, p *principal) error {
	product := productOf(r, p) // never "": the route needsProduct
	q := r.URL.Query()
	var stage fleet.Stage
	if v := q.Get("stage"); v != "" {
		var err error
		if stage, err = fleet.ParseStage("stage", v); err != nil {
			return err
		}
	}
	limit, err := intParam(q, "limit", defaultJobPage, 1, maxJobPage)
	if err != nil {
		return err
	}
	cursor := q.Get("cursor")
	if len(cursor) > maxCursorLen || strings.ContainsFunc(cursor, func(r rune) bool { return r < ' ' || r > '~' }) {
		return errBadCursor
	}
	items, next, err := s.jobPage(r.Context(), product, stage, int(limit), cursor)
	if errors.Is(err, store.ErrBadContinuation) {
		// Every store says so of a cursor it did not issue; any other
		// failure on a later page is a fault, not the cursor's.
		return errBadCursor
	}
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, api.Page[json.RawMessage]{Items: items, Cursor: next})
}

// jobPage is a page of at most limit jobs, encoded, and of at most
// maxJobPageBytes (but at least one job): a page the bytes cut short is
// read again at the length that fits, so that its cursor follows its last
// job.
func (s *server) jobPage(ctx context.Context, product string, stage fleet.Stage, limit int, cursor string) ([]json.RawMessage, string, error) {
	for {
		jobs, next, err := s.coord.ListJobs(ctx, product, stage, limit, cursor)
		if err != nil {
			return nil, "", err
		}
		items, size := make([]json.RawMessage, 0, len(jobs)), 0
		for _, j := range jobs {
			b, err := rawJSON(j) // as writeJSON encodes, so measured as sent
			if err != nil {
				return nil, "", err
			}
			if size += len(b); size > maxJobPageBytes && len(items) > 0 {
				break
			}
			items = append(items, b)
		}
		if len(items) == len(jobs) {
			return items, next, nil
		}
		limit = len(items)
	}
}

var errBadCursor = fleet.Invalid("cursor", "is not a cursor this listing returned; start again without it")

func (s *server) getJob(w http.ResponseWriter, r *http.Request, p *principal) error {
	id, err := pathName(r, "id")
	if err != nil {
		return err
	}
	// Without a product this is a lookup across products; the scope check
	// below then applies to whatever product the job is in.
	j, err := s.coord.GetJob(r.Context(), productOf(r, p), id)
	if err != nil {
		return err
	}
	if !p.allows(j.ProductID) {
		return forbidden("job %s belongs to a product outside this token's scope", id)
	}
	return writeJSON(w, http.StatusOK, j)
}

func (s *server) patchJob(w http.ResponseWriter, r *http.Request, p *principal) error {
	id, err := pathName(r, "id")
	if err != nil {
		return err
	}
	var req api.PatchRequest
	if err := s.decodeBody(w, r, &req, true); err != nil {
		return err
	}
	if req.LeaseEpoch == nil {
		return required("leaseEpoch", "the leaseEpoch the claim returned")
	}
	patch := coord.PatchRequest{LeaseEpoch: *req.LeaseEpoch, Checkpoint: req.Checkpoint, Usage: req.Usage, Diff: req.Diff, Engine: req.EngineFacts}
	if req.Head != nil {
		if *req.Head == "" {
			return fleet.Invalid("head", "must be the commit delivered; omit it when there is none")
		}
		patch.Head = *req.Head
	}
	if req.Stage != nil {
		if patch.Stage, err = fleet.ParseStage("stage", string(*req.Stage)); err != nil {
			return err
		}
	}
	product, err := s.jobProduct(r, p, id, "")
	if err != nil {
		return err
	}
	j, err := s.coord.Patch(r.Context(), p.id, product, id, patch)
	if err != nil {
		return err
	}
	if prefersMinimal(r) {
		w.Header().Set(api.HeaderPreferenceApplied, api.PreferMinimal)
		return noContent(w)
	}
	return writeJSON(w, http.StatusOK, j)
}

func (s *server) actOnJob(w http.ResponseWriter, r *http.Request, p *principal) error {
	id, err := pathName(r, "id")
	if err != nil {
		return err
	}
	action, err := coord.ParseAction(r.PathValue("action"))
	if err != nil {
		return err
	}
	var req api.ActionRequest
	if err := s.decodeBody(w, r, &req, false); err != nil {
		return err
	}
	product, err := s.jobProduct(r, p, id, "")
	if err != nil {
		return err
	}
	j, err := s.coord.Act(r.Context(), p.id, product, id, action, req.Reason)
	if err != nil {
		return err
	}
	if action == coord.ActionCancel && j.Stage.Leased() && j.CancelRequested {
		// Asked, not done: the holder acknowledges, or the grace forces it.
		return writeJSON(w, http.StatusAccepted, j)
	}
	return writeJSON(w, http.StatusOK, j)
}

func (s *server) jobRuns(w http.ResponseWriter, r *http.Request, p *principal) error {
	id, product, err := s.pathHeldJob(r, p)
	if err != nil {
		return err
	}
	runs, err := s.coord.Runs(r.Context(), product, id)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, api.List[fleet.Run]{Items: runs})
}

func (s *server) jobEvents(w http.ResponseWriter, r *http.Request, p *principal) error {
	id, err := pathName(r, "id")
	if err != nil {
		return err
	}
	q := r.URL.Query()
	after, err := intParam(q, "after", 0, 0, math.MaxInt64)
	if err != nil {
		return err
	}
	limit, err := intParam(q, "limit", maxEventPage, 1, maxEventPage)
	if err != nil {
		return err
	}
	wait, err := waitParam(r)
	if err != nil {
		return err
	}
	product, err := s.heldJobProduct(r, p, id)
	if err != nil {
		return err
	}
	ctx := r.Context()
	var sub *live.Subscription
	if wait > 0 {
		// The long-poll equivalent of the stream, for a client behind
		// something that buffers responses: subscribed before the read,
		// so an event written in between ends the wait.
		if sub, err = s.coord.Subscribe(ctx, live.Watch{JobID: id}); err != nil {
			return err
		}
		defer sub.Close()
	}
	events, err := s.coord.Events(ctx, product, id, after, int(limit))
	if err != nil {
		return err
	}
	if len(events) == 0 && sub != nil {
		t := s.timers.NewTicker(wait)
		defer t.Stop()
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C():
		case <-sub.Woken():
			if events, err = s.coord.Events(ctx, product, id, after, int(limit)); err != nil {
				return err
			}
			if len(events) > 0 {
				// Held still? As the stream checks (jobEventStream).
				if err := s.holderRead(r, p, product, id); err != nil {
					return err
				}
			}
		}
	}
	return writeJSON(w, http.StatusOK, api.List[fleet.Event]{Items: events})
}

func (s *server) explainJob(w http.ResponseWriter, r *http.Request, p *principal) error {
	id, product, err := s.pathHeldJob(r, p)
	if err != nil {
		return err
	}
	e, err := s.coord.Explain(r.Context(), catalog.Scope(p.products), product, id)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, e)
}
