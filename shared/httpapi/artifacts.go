package httpapi

import (
	"io"
	"math"
	"mime"
	"net/http"
	"strconv"
	"strings"

	"github.com/gigafactory/fleet/shared/api"
	"github.com/gigafactory/fleet/shared/coord/artifacts"
	"github.com/gigafactory/fleet/shared/fleet"
)

// uploadArtifact takes the artifact's bytes as the request body, whatever
// they are; MaxBodyBytes (a JSON cap) does not apply, the coordinator's
// ArtifactMaxBytes does. The length must be declared: the Functions host
// forwards a body only when Content-Length is set, so a chunked upload
// would arrive empty there.
func (s *server) uploadArtifact(w http.ResponseWriter, r *http.Request, p *principal) error {
	id, product, err := s.pathJob(r, p)
	if err != nil {
		return err
	}
	q := r.URL.Query()
	up := artifacts.Upload{ProductID: product, JobID: id, Name: q.Get("name"), Kind: fleet.ArtifactKind(q.Get("kind")),
		ContentType: r.Header.Get("Content-Type"), Size: r.ContentLength, Body: r.Body}
	if p.isFactory() {
		up.FactoryID = p.id
	} else {
		up.ActorID = p.id
	}
	if q.Has("leaseEpoch") {
		epoch, err := intParam(q, "leaseEpoch", 0, 0, math.MaxInt64)
		if err != nil {
			return err
		}
		up.LeaseEpoch = &epoch
	}
	if r.ContentLength < 0 {
		return fleet.Invalid("Content-Length", "is required: send the artifact with its length declared (the Functions host drops a chunked body)")
	}
	a, err := s.coord.UploadArtifact(r.Context(), up)
	if err != nil {
		return err
	}
	w.Header().Set("Location", apiPrefix+"/fleet/artifacts/"+a.ID)
	return writeJSON(w, http.StatusCreated, a)
}

func (s *server) listArtifacts(w http.ResponseWriter, r *http.Request, p *principal) error {
	id, product, err := s.pathHeldJob(r, p)
	if err != nil {
		return err
	}
	list, err := s.coord.Artifacts(r.Context(), product, id)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, api.List[fleet.Artifact]{Items: list})
}

// artifact reads the artifact {id} names, within p's scope; a factory
// only an artifact of a job it holds.
func (s *server) artifact(r *http.Request, p *principal) (*fleet.Artifact, error) {
	id, err := pathName(r, "id")
	if err != nil {
		return nil, err
	}
	a, err := s.coord.GetArtifact(r.Context(), productOf(r, p), id)
	if err != nil {
		return nil, err
	}
	if !p.allows(a.ProductID) {
		return nil, forbidden("artifact %s belongs to a product outside this token's scope", id)
	}
	if err := s.holderRead(r, p, a.ProductID, a.JobID); err != nil {
		return nil, err
	}
	return a, nil
}

func (s *server) getArtifact(w http.ResponseWriter, r *http.Request, p *principal) error {
	a, err := s.artifact(r, p)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, a)
}

// artifactContent streams the bytes. The ETag is the digest, so a client
// holding them revalidates with If-None-Match for a 304. The bytes are
// whatever a factory uploaded: they are served as an attachment, sandboxed
// and never sniffed, so a browser cannot run them as the API's page.
func (s *server) artifactContent(w http.ResponseWriter, r *http.Request, p *principal) error {
	a, err := s.artifact(r, p)
	if err != nil {
		return err
	}
	etag := `"` + a.SHA256 + `"`
	h := w.Header()
	h.Set("ETag", etag)
	h.Set("Cache-Control", "private, no-cache")
	if etagMatches(r.Header.Get("If-None-Match"), etag) {
		w.WriteHeader(http.StatusNotModified)
		return nil
	}
	body, err := s.coord.OpenArtifact(r.Context(), a)
	if err != nil {
		h.Del("ETag")
		return err
	}
	defer body.Close()
	h.Set("Content-Type", a.ContentType)
	h.Set("Content-Length", strconv.FormatInt(a.Size, 10))
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Content-Security-Policy", "sandbox; default-src 'none'")
	h.Set("Content-Disposition", mime.FormatMediaType("attachment", map[string]string{"filename": a.Name}))
	w.WriteHeader(http.StatusOK)
	if _, err := io.Copy(w, body); err != nil {
		// The status is sent: abort the connection so the client sees a
		// short body, never a whole-looking wrong one.
		s.log.ErrorContext(r.Context(), "artifact download cut short", "requestId", stateOf(r.Context()).id, "artifact", a.ID, "err", err)
		panic(http.ErrAbortHandler)
	}
	return nil
}

// etagMatches reports whether an If-None-Match header names etag (or is *).
// Weak tags match too: the comparison for If-None-Match is the weak one.
func etagMatches(header, etag string) bool {
	for _, t := range strings.Split(header, ",") {
		t = strings.TrimPrefix(strings.TrimSpace(t), "W/")
		if t == "*" || t == etag {
			return true
		}
	}
	return false
}

func (s *server) deleteArtifact(w http.ResponseWriter, r *http.Request, p *principal) error {
	a, err := s.artifact(r, p)
	if err != nil {
		return err
	}
	if err := s.coord.DeleteArtifact(r.Context(), p.id, a); err != nil {
		return err
	}
	return noContent(w)
}
