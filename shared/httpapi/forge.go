package httpapi

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net/http"
	"time"

	"github.com/gigafactory/fleet/shared/api"
	"github.com/gigafactory/fleet/shared/coord/pulls"
	"github.com/gigafactory/fleet/shared/fleet"
	"github.com/gigafactory/fleet/shared/forge"
	"github.com/gigafactory/fleet/shared/forge/github"
)

// webhookReadTimeout bounds the reading of a delivery's body: GitHub sends
// its largest, 25 MB, in a fraction of this.
const webhookReadTimeout = 30 * time.Second

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
	// The body is read before it can be verified: a delivery that cannot be
	// signed is refused first, and one is given a deadline for its body, so
	// a slow sender does not hold the route's budget (bodyBudget) for long.
	sig := r.Header.Get(github.HeaderSignature)
	if !github.WellFormed(sig) {
		return unauthenticated(github.HeaderSignature + ` is missing or is not "sha256=" and 64 hex digits`)
	}
	// A connection that takes no deadline (a test's recorder) is read without.
	_ = http.NewResponseController(w).SetReadDeadline(time.Now().Add(webhookReadTimeout))
	body, release, err := s.hookBodies.read(w, r, github.MaxPayload)
	if err != nil {
		return err
	}
	defer release()
	if err := github.Verify(s.ghSecret, body, sig); err != nil {
		return unauthenticated(github.HeaderSignature + " is not the HMAC-SHA256 of the body with the webhook secret")
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
