package httpapi

import (
	"encoding/json"
	"maps"
	"net/http"
	"slices"
	"strings"

	"github.com/gigafactory/fleet/shared/api"
	"github.com/gigafactory/fleet/shared/coord/echo"
	"github.com/gigafactory/fleet/shared/fleet"
)

// ingestOutcomeHeader tells an ingest's 200 apart (named here for the
// OpenAPI document).
const ingestOutcomeHeader = api.HeaderIngestOutcome

// ingestRef are the fields of an ingest body that name the item; the rest
// is the manifest, as one string or as its fields.
var ingestRef = []string{"source", "itemId", "revision"}

// ingest turns a tracker item into its job: 201 when created, 200 with the
// job (updated or unchanged, as the X-Fleet-Ingest header says) otherwise.
func (s *server) ingest(w http.ResponseWriter, r *http.Request, p *principal) error {
	product := productOf(r, p) // never "": the route needsProduct
	body, err := s.readJSONBody(w, r)
	if err != nil {
		return err
	}
	var fields map[string]json.RawMessage
	if err := decodeStrict(body, &fields, true); err != nil {
		return err
	}
	var ref fleet.TrackerRef
	if err := rawField(fields, "source", &ref.Source, "a string"); err != nil {
		return err
	}
	if err := rawField(fields, "itemId", &ref.ItemID, "a string"); err != nil {
		return err
	}
	if err := rawField(fields, "revision", &ref.Revision, "an integer"); err != nil {
		return err
	}
	manifest, err := ingestManifest(fields)
	if err != nil {
		return err
	}
	j, outcome, err := s.coord.Ingest(r.Context(), echo.IngestRequest{ProductID: product, Ref: ref, Manifest: manifest})
	if err != nil {
		return err
	}
	w.Header().Set(ingestOutcomeHeader, string(outcome))
	if outcome == echo.IngestCreated {
		w.Header().Set("Location", apiPrefix+"/fleet/jobs/"+j.ID)
		return writeJSON(w, http.StatusCreated, j)
	}
	return writeJSON(w, http.StatusOK, j)
}

// rawField decodes fields[name] into dst; a missing or null field is
// required, a wrong type names the field.
func rawField[T any](fields map[string]json.RawMessage, name string, dst *T, want string) error {
	raw, ok := fields[name]
	if !ok || string(raw) == "null" {
		return required(name, "")
	}
	if err := json.Unmarshal(raw, dst); err != nil {
		return fleet.Invalid(name, "must be %s", want)
	}
	return nil
}

// ingestManifest is the manifest of an ingest body: its manifest string,
// or else the manifest's fields, written as front matter (JSON is YAML)
// with body as the task, so both shapes go through the one manifest parser
// and fail on the same fields.
func ingestManifest(fields map[string]json.RawMessage) ([]byte, error) {
	rest := map[string]json.RawMessage{}
	for k, v := range fields {
		if !slices.Contains(ingestRef, k) && k != "manifest" {
			rest[k] = v
		}
	}
	if raw, ok := fields["manifest"]; ok {
		if len(rest) > 0 {
			keys := slices.Sorted(maps.Keys(rest))
			return nil, fleet.Invalid(keys[0], "send either manifest (the Markdown) or the manifest's fields, not both")
		}
		var m string
		if err := json.Unmarshal(raw, &m); err != nil || strings.TrimSpace(m) == "" {
			return nil, fleet.Invalid("manifest", "must be the Markdown manifest as a non-empty string")
		}
		return []byte(m), nil
	}
	if len(rest) == 0 {
		return nil, required("manifest", "the Markdown manifest as a string, or the manifest's fields (repo, title, ...) with body")
	}
	task := ""
	if raw, ok := rest["body"]; ok {
		if err := json.Unmarshal(raw, &task); err != nil {
			return nil, fleet.Invalid("body", "must be a string (the task, Markdown)")
		}
		delete(rest, "body")
	}
	front, err := json.Marshal(rest)
	if err != nil {
		return nil, fleet.Invalid("", "the manifest's fields cannot be read: %v", err)
	}
	return []byte("---\n" + string(front) + "\n---\n" + task), nil
}

// jobEcho answers a tracked job's delivery state.
func (s *server) jobEcho(w http.ResponseWriter, r *http.Request, p *principal) error {
	id, product, err := s.pathJob(r, p)
	if err != nil {
		return err
	}
	v, err := s.coord.Echo(r.Context(), product, id)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, v)
}

// resendEcho starts a job's delivery over from seq 1 and answers 202 with
// its state: the echo function does the sending.
func (s *server) resendEcho(w http.ResponseWriter, r *http.Request, p *principal) error {
	var req api.ResendRequest
	if err := s.decodeBody(w, r, &req, true); err != nil {
		return err
	}
	if err := fleet.ValidateName("jobId", req.JobID); err != nil {
		return err
	}
	product, err := s.jobProduct(r, p, req.JobID, "")
	if err != nil {
		return err
	}
	v, err := s.coord.ResendEcho(r.Context(), product, req.JobID, p.id)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusAccepted, v)
}
