package httpapi

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net/http"

	"github.com/gigafactory/fleet/shared/api"
	"github.com/gigafactory/fleet/shared/coord/pulls"
	"github.com/gigafactory/fleet/shared/fleet"
	"github.com/gigafactory/fleet/shared/forge"
	"github.com/gigafactory/fleet/shared/forge/github"
)

// maxDeliveryID bounds the X-GitHub-Delivery header kept (a GUID).
const maxDeliveryID = 100

// githubWebhook is POST /fleet/forge/github: no bearer, the body's HMAC
// with the webhook secret instead (API.md "Pull requests"). Nothing the
// signature does not cover is trusted: the event header only picks the
// payload's shape (github.Parse), the delivery id only makes a redelivery
// a no-op, beside the body's own digest.
func (s *server) githubWebhook(w http.ResponseWriter, r *http.Request, _ *principal) error {
	if len(s.ghSecret) == 0 {
		return fleet.Errorf(fleet.CodeUnavailable, "no GitHub webhook secret is configured (FLEET_GITHUB_WEBHOOK_SECRET_FILE): deliveries cannot be verified")
	}
	body, err := readBodyUpTo(w, r, github.MaxPayload)
	if err != nil {
		return err
	}
	if err := github.Verify(s.ghSecret, body, r.Header.Get(github.HeaderSignature)); err != nil {
		return unauthenticated(github.HeaderSignature + " is missing or is not the HMAC-SHA256 of the body with the webhook secret")
	}
	ev, err := github.Parse(r.Header.Get(github.HeaderEvent), body)
	switch {
	case errors.Is(err, forge.ErrIgnored):
		w.WriteHeader(http.StatusNoContent)
		return nil
	case errors.Is(err, github.ErrMalformed):
		return fleet.Invalid("body", "%v", err)
	case err != nil:
		return err
	}
	id := r.Header.Get(github.HeaderDelivery)
	if len(id) > maxDeliveryID {
		return fleet.Invalid(github.HeaderDelivery, "is longer than %d characters", maxDeliveryID)
	}
	sum := sha256.Sum256(body)
	out, why, err := s.coord.ForgeWebhook(r.Context(), ev, pulls.Delivery{ID: id, Digest: hex.EncodeToString(sum[:])})
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, api.ForgeDelivery{Outcome: string(out), Message: why})
}
