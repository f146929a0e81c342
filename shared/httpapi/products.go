package httpapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"strings"

	"github.com/gigafactory/fleet/shared/api"
	"github.com/gigafactory/fleet/shared/coord/catalog"
	"github.com/gigafactory/fleet/shared/fleet"
)

// trackerChange reads the tracker field of a product request.
func trackerChange(raw json.RawMessage) (*catalog.TrackerChange, error) {
	switch t := bytes.TrimSpace(raw); {
	case len(t) == 0:
		return nil, nil
	case string(t) == "null":
		return &catalog.TrackerChange{Remove: true}, nil
	}
	var req api.TrackerRequest
	if err := decodeStrict(raw, &req, true); err != nil {
		var fe *fleet.Error
		if errors.As(err, &fe) {
			fe.Field = strings.TrimSuffix("tracker."+fe.Field, ".")
		}
		return nil, err
	}
	return &catalog.TrackerChange{WebhookURL: req.WebhookURL, Secret: fleet.Secret(req.Secret)}, nil
}

// forgeChange reads the forge field of a product request.
func forgeChange(raw json.RawMessage) (*catalog.ForgeChange, error) {
	switch t := bytes.TrimSpace(raw); {
	case len(t) == 0:
		return nil, nil
	case string(t) == "null":
		return &catalog.ForgeChange{Remove: true}, nil
	}
	var cfg fleet.ForgeConfig
	if err := decodeStrict(raw, &cfg, true); err != nil {
		var fe *fleet.Error
		if errors.As(err, &fe) {
			fe.Field = strings.TrimSuffix("forge."+fe.Field, ".")
		}
		return nil, err
	}
	return &catalog.ForgeChange{Config: cfg}, nil
}

// healthz is liveness only: it touches no store, so a slow store does not
// get the process restarted on top of being slow.
func (s *server) healthz(w http.ResponseWriter, _ *http.Request, _ *principal) error {
	return writeJSON(w, http.StatusOK, api.Health{Status: "ok"})
}

// scopedProduct reads path parameter productId and checks p may use it.
func scopedProduct(r *http.Request, p *principal) (string, error) {
	id, err := pathName(r, "productId")
	if err != nil {
		return "", err
	}
	if !p.allows(id) {
		return "", forbidden("product %s is outside this token's scope", id)
	}
	return id, nil
}

func (s *server) putProduct(w http.ResponseWriter, r *http.Request, p *principal) error {
	id, err := scopedProduct(r, p)
	if err != nil {
		return err
	}
	var req api.ProductRequest
	if err := s.decodeBody(w, r, &req, true); err != nil {
		return err
	}
	if req.Repos == nil {
		return required("repos", "send [] for none: the list replaces the product's repos")
	}
	if req.MoveRepos && len(p.products) > 0 {
		// Moving a repo takes it from another product: only a principal
		// over every product may decide that.
		return forbidden("only an unscoped operator may move repos between products (moveRepos)")
	}
	tracker, err := trackerChange(req.Tracker)
	if err != nil {
		return err
	}
	forge, err := forgeChange(req.Forge)
	if err != nil {
		return err
	}
	prod, err := s.coord.DeclareProduct(r.Context(), catalog.ProductRequest{ID: id, Name: req.Name, Repos: req.Repos, MoveRepos: req.MoveRepos,
		Tracker: tracker, Forge: forge, MaxRunning: req.MaxRunning})
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, prod.View())
}

func (s *server) getProduct(w http.ResponseWriter, r *http.Request, p *principal) error {
	id, err := scopedProduct(r, p)
	if err != nil {
		return err
	}
	prod, err := s.coord.GetProduct(r.Context(), id)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, prod.View())
}

// repos lists the repos of the request's product, or of every product in
// the principal's scope, naming only the factories that scope sees.
func (s *server) repos(w http.ResponseWriter, r *http.Request, p *principal) error {
	list, err := s.coord.Repos(r.Context(), catalog.Scope(p.products), productOf(r, p))
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, api.List[catalog.RepoInfo]{Items: list})
}

// metrics reports on the request's product, or on the whole fleet for an
// unscoped principal that names none. A principal scoped to several
// products must pick one: the whole-fleet view would show it the others.
func (s *server) metrics(w http.ResponseWriter, r *http.Request, p *principal) error {
	product := productOf(r, p)
	if product == "" && len(p.products) > 0 {
		return fleet.Invalid(productField, "is required: this token is scoped to several products")
	}
	m, err := s.coord.Metrics(r.Context(), product)
	if err != nil {
		return err
	}
	if len(p.products) > 0 {
		// This process's counters and the store's and transport's figures
		// cover every product: only an unscoped operator sees them.
		m.Coord, m.Adapters = nil, nil
	}
	return writeJSON(w, http.StatusOK, m)
}

func (s *server) queueState(w http.ResponseWriter, r *http.Request, p *principal) error {
	product := productOf(r, p) // never "": the route needsProduct
	qs, err := s.coord.QueueState(r.Context(), product)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, qs)
}
