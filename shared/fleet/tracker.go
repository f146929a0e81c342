package fleet

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"time"
)

// TrackerRef is the tracker item a job was ingested from (API.md, "Tracker
// bridge"): the job's idempotency key is TrackerKey(Source, ItemID), and
// Revision is the item's revision the job now carries.
type TrackerRef struct {
	Source   string `json:"source"`
	ItemID   string `json:"itemId"`
	Revision int64  `json:"revision"`
}

// Limits of a tracker reference.
const (
	MaxTrackerItemIDLen = 200
	MaxWebhookURLLen    = 2000
	MaxSecretLen        = 1024
	// MinSecretLen keeps an HMAC key from being guessable.
	MinSecretLen = 16
)

// TrackerKey is the idempotency key of a tracker item's job: one item, one
// job, whatever its revision.
func TrackerKey(source, itemID string) string { return "tracker:" + source + ":" + itemID }

// Validate checks a reference a client sent. The source is a plain name
// (it is part of the idempotency key, so ':' is refused there); the item id
// is whatever the tracker calls it ("PROJ-4711", "owner/repo#12") but
// printable and bounded; the revision is positive.
func (r TrackerRef) Validate() error {
	if err := ValidateName("source", r.Source); err != nil {
		return err
	}
	switch {
	case r.ItemID == "":
		return Invalid("itemId", "is required")
	case strings.TrimSpace(r.ItemID) != r.ItemID:
		return Invalid("itemId", "must not start or end with spaces")
	case strings.ContainsAny(r.ItemID, "\r\n\t"):
		return Invalid("itemId", "must be one line")
	}
	if err := ValidateText("itemId", r.ItemID, MaxTrackerItemIDLen); err != nil {
		return err
	}
	if r.Revision < 1 {
		return Invalid("revision", "must be a positive integer, got %d", r.Revision)
	}
	return nil
}

// Started reports whether the job has started: it was assigned at least
// once (a lease was ever taken, so leaseEpoch moved), or it left the
// stages a never-assigned job can be in (queued, blocked). A tracker item's
// new revision may only replace what a job that has not started will run.
func (j *Job) Started() bool {
	return j.LeaseEpoch > 0 || (j.Stage != StageQueued && j.Stage != StageBlocked)
}

// Secret is a credential kept in the store but never shown: it prints and
// logs as "[redacted]", whatever the formatting verb or slog handler. It
// still encodes to JSON (the store needs it); the API never encodes the
// documents that hold one (see ProductView).
type Secret string

// Redacted is how a Secret prints.
const Redacted = "[redacted]"

func (Secret) String() string               { return Redacted }
func (Secret) GoString() string             { return Redacted }
func (Secret) LogValue() slog.Value         { return slog.StringValue(Redacted) }
func (s Secret) Format(f fmt.State, _ rune) { _, _ = f.Write([]byte(Redacted)) }

// TrackerConfig is a product's echo target: every event of its tracked jobs
// is POSTed to WebhookURL, signed with Secret.
type TrackerConfig struct {
	WebhookURL string `json:"webhookUrl"`
	Secret     Secret `json:"secret"`
}

// ValidateWebhookURL checks an absolute http or https URL with a host and
// no credentials in it (they would be stored and shown in the clear).
func ValidateWebhookURL(field, raw string) error {
	if raw == "" {
		return Invalid(field, "is required")
	}
	if len(raw) > MaxWebhookURLLen {
		return Invalid(field, "is longer than %d characters", MaxWebhookURLLen)
	}
	u, err := url.Parse(raw)
	switch {
	case err != nil:
		return Invalid(field, "is not a URL: %v", err)
	case u.Scheme != "http" && u.Scheme != "https":
		return Invalid(field, "must be an absolute http or https URL, got scheme %q", u.Scheme)
	case u.Host == "" || u.Hostname() == "":
		return Invalid(field, "must name a host")
	case u.User != nil:
		return Invalid(field, "must not carry credentials; the webhook authenticates requests by their signature")
	case u.Fragment != "":
		return Invalid(field, "must not have a fragment")
	}
	return nil
}

// ValidateSecret checks a webhook signing secret.
func ValidateSecret(field string, s Secret) error {
	switch {
	case len(s) < MinSecretLen:
		return Invalid(field, "must be at least %d characters", MinSecretLen)
	case len(s) > MaxSecretLen:
		return Invalid(field, "is longer than %d characters", MaxSecretLen)
	}
	return ValidateText(field, string(s), MaxSecretLen)
}

// EchoEvent is the body POSTed to a tracker webhook for one event.
type EchoEvent struct {
	Source    string    `json:"source"`
	ItemID    string    `json:"itemId"`
	JobID     string    `json:"jobId"`
	ProductID string    `json:"productId"`
	Seq       int64     `json:"seq"`
	Type      EventType `json:"type"`
	// Stage is the job's stage once the event happened.
	Stage Stage     `json:"stage"`
	At    time.Time `json:"at"`
}

// Echo headers.
const (
	EchoEventIDHeader   = "X-Fleet-Event-Id"
	EchoSignatureHeader = "X-Fleet-Signature"
)

// EchoEventID is the X-Fleet-Event-Id of event seq of a job: receivers
// de-duplicate on it (delivery is at least once).
func EchoEventID(jobID string, seq int64) string { return fmt.Sprintf("%s:%d", jobID, seq) }

// SignEcho is the X-Fleet-Signature of body: "sha256=" and the hex
// HMAC-SHA256 of the exact bytes sent, keyed with the secret.
func SignEcho(secret Secret, body []byte) string {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write(body)
	return "sha256=" + hex.EncodeToString(m.Sum(nil))
}

// VerifyEcho checks a signature SignEcho made, in constant time: what a
// receiver does before trusting a body.
func VerifyEcho(secret Secret, body []byte, signature string) bool {
	return hmac.Equal([]byte(SignEcho(secret, body)), []byte(signature))
}

// ProductView is a product as the API shows it: every field of the stored
// document except the tracker's secret, of which only its presence shows.
// Its Tracker field hides the embedded one when encoded (the shallower
// field wins), so fields added to Product show without a change here.
type ProductView struct {
	*Product
	Tracker *TrackerView `json:"tracker,omitempty"`
}

// TrackerView is a product's tracker target without its secret.
type TrackerView struct {
	WebhookURL string `json:"webhookUrl"`
	SecretSet  bool   `json:"secretSet"`
}

// View is the product as the API shows it.
func (p *Product) View() ProductView {
	v := ProductView{Product: p}
	if p.Tracker != nil {
		v.Tracker = &TrackerView{WebhookURL: p.Tracker.WebhookURL, SecretSet: p.Tracker.Secret != ""}
	}
	return v
}
