package httpapi

import (
	"bytes"
	"math"
	"net/http"
	"strconv"

	"github.com/gigafactory/fleet/shared/api"
	"github.com/gigafactory/fleet/shared/coord/catalog"
	"github.com/gigafactory/fleet/shared/fleet"
)

// putProfile stores a new version of a profile of the request's product.
func (s *server) putProfile(w http.ResponseWriter, r *http.Request, p *principal) error {
	product := productOf(r, p) // never "": the route needsProduct
	name, err := pathName(r, "name")
	if err != nil {
		return err
	}
	doc, err := s.readProfile(w, r)
	if err != nil {
		return err
	}
	prof, err := s.coord.PutProfile(r.Context(), catalog.PutProfileRequest{ProductID: product, Name: name, Document: doc, Actor: p.id})
	if err != nil {
		return err
	}
	w.Header().Set("Location", apiPrefix+"/fleet/profiles/"+name+"?version="+strconv.FormatInt(prof.Version, 10))
	return writeJSON(w, http.StatusCreated, prof)
}

// readProfile reads a profile sent raw as Markdown or wrapped in JSON.
func (s *server) readProfile(w http.ResponseWriter, r *http.Request) ([]byte, error) {
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
			return nil, required("profile", "the request body is empty")
		}
		return body, nil
	case isJSON(mt):
		var req api.ProfileRequest
		if err := s.decodeBody(w, r, &req, true); err != nil {
			return nil, err
		}
		if req.Profile == nil {
			return nil, required("profile", "the Markdown profile as a string")
		}
		return []byte(*req.Profile), nil
	case mt == "":
		return nil, fleet.Invalid(contentTypeField, "is required: text/markdown for a raw profile, application/json for {\"profile\": ...}")
	}
	return nil, fleet.Invalid(contentTypeField, "%s is not accepted here; send text/markdown or application/json", mt)
}

func (s *server) listProfiles(w http.ResponseWriter, r *http.Request, p *principal) error {
	product := productOf(r, p) // never "": the route needsProduct
	list, err := s.coord.ListProfiles(r.Context(), product)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, api.List[catalog.ProfileSummary]{Items: list})
}

// getProfile reads the latest version of a profile, or ?version=.
func (s *server) getProfile(w http.ResponseWriter, r *http.Request, p *principal) error {
	product := productOf(r, p) // never "": the route needsProduct
	name, err := pathName(r, "name")
	if err != nil {
		return err
	}
	version, err := intParam(r.URL.Query(), "version", 0, 1, math.MaxInt64)
	if err != nil {
		return err
	}
	prof, err := s.coord.GetProfile(r.Context(), product, name, version)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, prof)
}

func (s *server) profileVersions(w http.ResponseWriter, r *http.Request, p *principal) error {
	product := productOf(r, p) // never "": the route needsProduct
	name, err := pathName(r, "name")
	if err != nil {
		return err
	}
	list, err := s.coord.ProfileVersions(r.Context(), product, name)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, api.List[catalog.ProfileSummary]{Items: list})
}
