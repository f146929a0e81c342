package httpapi

import (
	"net/http"

	"github.com/gigafactory/fleet/shared/api"
	"github.com/gigafactory/fleet/shared/coord/catalog"
	"github.com/gigafactory/fleet/shared/fleet"
)

func (s *server) enroll(w http.ResponseWriter, r *http.Request, p *principal) error {
	var req api.EnrollRequest
	if err := s.decodeBody(w, r, &req, true); err != nil {
		return err
	}
	// A scoped operator may enrol only factories confined to its products;
	// a factory with no products would serve all of them.
	if !p.covers(&fleet.Factory{Products: req.Products}) {
		return forbidden("a token scoped to products may enrol only factories serving those products (list them in products)")
	}
	f, token, err := s.coord.Enroll(r.Context(), catalog.EnrollRequest{
		FactoryID: req.FactoryID, Kind: req.Kind, Products: req.Products,
		Capabilities: req.Capabilities, SeatLimit: req.SeatLimit, CostPerHourUSD: req.CostPerHourUSD,
	})
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusCreated, api.EnrollResponse{FactoryID: f.ID, Token: token, Factory: f})
}

func (s *server) heartbeat(w http.ResponseWriter, r *http.Request, p *principal) error {
	var req api.HeartbeatRequest
	if err := s.decodeBody(w, r, &req, true); err != nil {
		return err
	}
	if req.Capabilities == nil {
		return required("capabilities", "send [] for none: a heartbeat replaces the list")
	}
	if req.Repos == nil {
		return required("repos", "send [] for none: a heartbeat replaces the list")
	}
	f, err := s.coord.Heartbeat(r.Context(), p.token, catalog.Heartbeat{
		Capabilities: req.Capabilities, Repos: req.Repos, Load: req.Load,
		Health: req.Health, SeatLimit: req.SeatLimit, Cooldowns: req.Cooldowns,
	})
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, f)
}

// listFactories lists the factories serving the request's product, or for
// a principal scoped to several products those serving any of them; a
// shared factory shows only the caller's products and their repos.
func (s *server) listFactories(w http.ResponseWriter, r *http.Request, p *principal) error {
	fs, err := s.coord.ListFactories(r.Context(), productOf(r, p))
	if err != nil {
		return err
	}
	view, err := s.coord.View(r.Context(), catalog.Scope(p.products))
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, api.List[*fleet.Factory]{Items: view.Factories(fs)})
}

// factoryFor reads factory {id} and checks p may manage it. A factory acting
// on itself was admitted by authorize and needs no read.
func (s *server) factoryFor(r *http.Request, p *principal) (string, error) {
	id, err := pathName(r, "id")
	if err != nil {
		return "", err
	}
	if p.isFactory() {
		return id, nil
	}
	f, err := s.coord.GetFactory(r.Context(), id)
	if err != nil {
		return "", err
	}
	if !p.covers(f) {
		return "", forbidden("factory %s serves products outside this token's scope", id)
	}
	return id, nil
}

func (s *server) deregister(w http.ResponseWriter, r *http.Request, p *principal) error {
	id, err := s.factoryFor(r, p)
	if err != nil {
		return err
	}
	if err := s.coord.Deregister(r.Context(), id); err != nil {
		return err
	}
	return noContent(w)
}

// drain and undrain set a factory's draining flag (an extension of API.md:
// no new assignments, running jobs kept).
func (s *server) drain(w http.ResponseWriter, r *http.Request, p *principal) error {
	return s.setDraining(w, r, p, true)
}

func (s *server) undrain(w http.ResponseWriter, r *http.Request, p *principal) error {
	return s.setDraining(w, r, p, false)
}

func (s *server) setDraining(w http.ResponseWriter, r *http.Request, p *principal, draining bool) error {
	id, err := s.factoryFor(r, p)
	if err != nil {
		return err
	}
	f, err := s.coord.SetDraining(r.Context(), id, draining)
	if err != nil {
		return err
	}
	return s.writeFactory(w, r, p, http.StatusOK, f)
}

// writeFactory answers with f as p's view shows it: a factory p covers
// serves only p's products, but may have another product's repos checked
// out.
func (s *server) writeFactory(w http.ResponseWriter, r *http.Request, p *principal, status int, f *fleet.Factory) error {
	view, err := s.coord.View(r.Context(), catalog.Scope(p.products))
	if err != nil {
		return err
	}
	return writeJSON(w, status, view.Factory(f))
}

func (s *server) rotateToken(w http.ResponseWriter, r *http.Request, p *principal) error {
	id, err := s.factoryFor(r, p)
	if err != nil {
		return err
	}
	token, err := s.coord.RotateToken(r.Context(), id)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, api.TokenResponse{FactoryID: id, Token: token})
}

func (s *server) revokeToken(w http.ResponseWriter, r *http.Request, p *principal) error {
	id, err := s.factoryFor(r, p)
	if err != nil {
		return err
	}
	if err := s.coord.RevokeToken(r.Context(), id); err != nil {
		return err
	}
	return noContent(w)
}
