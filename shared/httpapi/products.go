package httpapi

import (
	"net/http"
	"slices"
	"strings"

	"github.com/gigafactory/fleet/shared/coord"
	"github.com/gigafactory/fleet/shared/fleet"
)

// productRequest declares a product. Repos replaces the owned list, so it is
// required: an omitted list would disown every repo.
type productRequest struct {
	Name  string   `json:"name"`
	Repos []string `json:"repos"`
}

type healthResponse struct {
	Status string `json:"status"`
}

// healthz is liveness only: it touches no store, so a slow store does not
// get the process restarted on top of being slow.
func (s *server) healthz(w http.ResponseWriter, _ *http.Request, _ *principal) error {
	return writeJSON(w, http.StatusOK, healthResponse{Status: "ok"})
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
	var req productRequest
	if err := s.decodeBody(w, r, &req, true); err != nil {
		return err
	}
	if req.Repos == nil {
		return required("repos", "send [] for none: the list replaces the product's repos")
	}
	prod, err := s.coord.PutProduct(r.Context(), id, req.Name, req.Repos)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, prod)
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
	return writeJSON(w, http.StatusOK, prod)
}

// repos lists the repos of the request's product, of every product for an
// unscoped principal, or of each product in a multi-product scope merged.
func (s *server) repos(w http.ResponseWriter, r *http.Request, p *principal) error {
	scope := p.products
	if prod := productOf(r, p); prod != "" {
		scope = []string{prod}
	}
	if len(scope) == 0 {
		all, err := s.coord.Repos(r.Context(), "")
		if err != nil {
			return err
		}
		return writeJSON(w, http.StatusOK, items[coord.RepoInfo]{Items: all})
	}
	byRepo := map[string]*coord.RepoInfo{}
	for _, prod := range scope {
		list, err := s.coord.Repos(r.Context(), prod)
		if err != nil {
			return err
		}
		for _, ri := range list {
			if cur := byRepo[ri.Repo]; cur != nil {
				cur.Products = union(cur.Products, ri.Products)
				cur.Factories = union(cur.Factories, ri.Factories)
				continue
			}
			byRepo[ri.Repo] = &ri
		}
	}
	out := make([]coord.RepoInfo, 0, len(byRepo))
	for _, ri := range byRepo {
		out = append(out, *ri)
	}
	slices.SortFunc(out, func(a, b coord.RepoInfo) int { return strings.Compare(a.Repo, b.Repo) })
	return writeJSON(w, http.StatusOK, items[coord.RepoInfo]{Items: out})
}

// union merges two sorted, duplicate-free lists into one.
func union(a, b []string) []string {
	out := slices.Concat(a, b)
	slices.Sort(out)
	return slices.Compact(out)
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
	return writeJSON(w, http.StatusOK, m)
}

func (s *server) queueState(w http.ResponseWriter, r *http.Request, p *principal) error {
	product, err := needProduct(r, p)
	if err != nil {
		return err
	}
	qs, err := s.coord.QueueState(r.Context(), product)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, qs)
}
