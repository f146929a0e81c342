package github

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/gigafactory/fleet/shared/forge"
)

// Webhook headers (docs.github.com/en/webhooks/webhook-events-and-payloads#delivery-headers).
const (
	HeaderEvent     = "X-GitHub-Event"
	HeaderDelivery  = "X-GitHub-Delivery"
	HeaderSignature = "X-Hub-Signature-256"
)

// MaxPayload is the largest payload GitHub sends (25 MB: "Payloads are
// capped at 25 MB", docs.github.com/en/webhooks/webhook-events-and-payloads).
const MaxPayload = 25 << 20

// ErrSignature: the delivery's X-Hub-Signature-256 is missing or is not
// the HMAC of its body with the secret.
var ErrSignature = errors.New("github: the webhook signature does not match the body")

// signature is header's HMAC when it has the shape GitHub sends,
// "sha256=" and 64 hex digits.
func signature(header string) ([]byte, bool) {
	hexSig, ok := strings.CutPrefix(header, "sha256=")
	if !ok || len(hexSig) != 2*sha256.Size {
		return nil, false
	}
	got, err := hex.DecodeString(hexSig)
	return got, err == nil
}

// WellFormed reports whether header could be a signature at all, so that a
// delivery without one is refused before its body is read.
func WellFormed(header string) bool {
	_, ok := signature(header)
	return ok
}

// Verify checks header ("sha256=<hex>") is the HMAC-SHA256 of body with
// secret, comparing in constant time.
func Verify(secret, body []byte, header string) error {
	got, ok := signature(header)
	if !ok || len(secret) == 0 {
		return ErrSignature
	}
	mac := hmac.New(sha256.New, secret)
	mac.Write(body)
	if !hmac.Equal(mac.Sum(nil), got) {
		return ErrSignature
	}
	return nil
}

// Sign is the X-Hub-Signature-256 value of body with secret (what GitHub
// sends; the demo's forge double and the tests sign with it).
func Sign(secret, body []byte) string {
	mac := hmac.New(sha256.New, secret)
	mac.Write(body)
	return "sha256=" + hex.EncodeToString(mac.Sum(nil))
}

// Payload shapes, the parts the fleet reads (the schemas of
// @octokit/openapi-webhooks: pull-request-review-submitted,
// check-run-completed, check-suite-completed, pull-request-closed, status).
type (
	repository struct {
		Name  string `json:"name"`
		Owner struct {
			Login string `json:"login"`
		} `json:"owner"`
	}
	prRef struct {
		Number  int    `json:"number"`
		HTMLURL string `json:"html_url"`
		Merged  bool   `json:"merged"`
		Head    struct {
			Ref string `json:"ref"`
			SHA string `json:"sha"`
		} `json:"head"`
	}
	reviewPayload struct {
		Action string `json:"action"`
		Review *struct {
			ID          int64     `json:"id"`
			State       string    `json:"state"`
			Body        string    `json:"body"`
			CommitID    string    `json:"commit_id"`
			HTMLURL     string    `json:"html_url"`
			SubmittedAt time.Time `json:"submitted_at"`
			// AuthorAssociation is how the reviewer relates to the
			// repository: OWNER, MEMBER, COLLABORATOR, CONTRIBUTOR,
			// FIRST_TIMER, FIRST_TIME_CONTRIBUTOR, MANNEQUIN or NONE.
			AuthorAssociation string `json:"author_association"`
			User              struct {
				Login string `json:"login"`
			} `json:"user"`
		} `json:"review"`
		PullRequest *prRef     `json:"pull_request"`
		Repository  repository `json:"repository"`
	}
	checkRunPayload struct {
		Action   string `json:"action"`
		CheckRun *struct {
			checkRun
			CompletedAt  time.Time `json:"completed_at"`
			PullRequests []prRef   `json:"pull_requests"`
			App          struct {
				Slug string `json:"slug"`
			} `json:"app"`
		} `json:"check_run"`
		Repository repository `json:"repository"`
	}
	checkSuitePayload struct {
		Action     string `json:"action"`
		CheckSuite *struct {
			HeadBranch   string    `json:"head_branch"`
			HeadSHA      string    `json:"head_sha"`
			Status       string    `json:"status"`
			Conclusion   string    `json:"conclusion"`
			URL          string    `json:"url"`
			UpdatedAt    time.Time `json:"updated_at"`
			PullRequests []prRef   `json:"pull_requests"`
			App          struct {
				Slug string `json:"slug"`
				Name string `json:"name"`
			} `json:"app"`
		} `json:"check_suite"`
		Repository repository `json:"repository"`
	}
	// statusPayload is a commit status created: it names no pull
	// request, only the commit and (up to ten of) the branches holding it.
	statusPayload struct {
		SHA         string    `json:"sha"`
		State       string    `json:"state"`
		Context     string    `json:"context"`
		Description string    `json:"description"`
		TargetURL   string    `json:"target_url"`
		UpdatedAt   time.Time `json:"updated_at"`
		Branches    []struct {
			Name string `json:"name"`
		} `json:"branches"`
		Repository repository `json:"repository"`
	}
	pullRequestPayload struct {
		Action      string     `json:"action"`
		PullRequest *prRef     `json:"pull_request"`
		Repository  repository `json:"repository"`
	}
)

func (r repository) repo() forge.Repo { return forge.Repo{Owner: r.Owner.Login, Name: r.Name} }

// Parse reads a verified delivery. The event header only picks the shape to
// read: every fact comes from the signed body, which must hold that
// event's own object, so a header changed in flight makes nothing of a
// genuine body. Events and actions the fleet does not act on are
// forge.ErrIgnored.
func Parse(event string, body []byte) (forge.Event, error) {
	switch event {
	case "pull_request_review":
		var p reviewPayload
		if err := json.Unmarshal(body, &p); err != nil || p.Review == nil || p.PullRequest == nil {
			return forge.Event{}, malformed(event, err)
		}
		if p.Action != "submitted" {
			return forge.Event{}, forge.ErrIgnored
		}
		ev := forge.Event{Repo: p.Repository.repo(), Number: p.PullRequest.Number, HeadRef: p.PullRequest.Head.Ref,
			HeadSHA: p.Review.CommitID, Author: p.Review.User.Login, Body: p.Review.Body, URL: p.Review.HTMLURL, At: p.Review.SubmittedAt,
			ReviewID: p.Review.ID,
			Member:   slices.Contains([]string{"OWNER", "MEMBER", "COLLABORATOR"}, p.Review.AuthorAssociation)}
		// Webhooks say "approved"; the REST API says "APPROVED".
		switch strings.ToLower(p.Review.State) {
		case "approved":
			ev.Kind = forge.EventApproved
		case "changes_requested":
			ev.Kind = forge.EventChangesRequested
		default:
			return forge.Event{}, forge.ErrIgnored
		}
		return ev, nil
	case "check_run":
		var p checkRunPayload
		if err := json.Unmarshal(body, &p); err != nil || p.CheckRun == nil {
			return forge.Event{}, malformed(event, err)
		}
		cr := p.CheckRun
		c := cr.check()
		if p.Action != "completed" || !c.Failing() {
			return forge.Event{}, forge.ErrIgnored
		}
		ev := forge.Event{Kind: forge.EventCheckFailed, Repo: p.Repository.repo(), HeadSHA: cr.HeadSHA, Author: cr.App.Slug,
			Name: c.Name, Title: c.Title, Summary: c.Summary, Text: c.Text, URL: c.URL, At: cr.CompletedAt}
		if len(cr.PullRequests) > 0 {
			ev.Number, ev.HeadRef = cr.PullRequests[0].Number, cr.PullRequests[0].Head.Ref
		}
		return ev, nil
	case "check_suite":
		var p checkSuitePayload
		if err := json.Unmarshal(body, &p); err != nil || p.CheckSuite == nil {
			return forge.Event{}, malformed(event, err)
		}
		cs := p.CheckSuite
		if p.Action != "completed" {
			return forge.Event{}, forge.ErrIgnored
		}
		ev := forge.Event{Repo: p.Repository.repo(), HeadRef: cs.HeadBranch, HeadSHA: cs.HeadSHA, Author: cs.App.Slug,
			Name: cs.App.Name, URL: cs.URL, At: cs.UpdatedAt}
		if len(cs.PullRequests) > 0 {
			ev.Number = cs.PullRequests[0].Number
		}
		switch {
		case cs.Conclusion == "success":
			ev.Kind = forge.EventChecksPassed
		case (forge.Check{Completed: true, Conclusion: cs.Conclusion}).Failing():
			// A suite carries no output: its runs' output is read when
			// the feedback is written.
			ev.Kind, ev.Title, ev.Suite = forge.EventCheckFailed, "check suite "+cs.Conclusion, true
		default:
			return forge.Event{}, forge.ErrIgnored
		}
		return ev, nil
	case "status":
		var p statusPayload
		if err := json.Unmarshal(body, &p); err != nil || p.SHA == "" || p.State == "" || p.Context == "" {
			return forge.Event{}, malformed(event, err)
		}
		// CI such as Jenkins posts statuses, never a check run or suite. A
		// status that turns success may be the last thing autoMerge waits
		// for: it is checks_passed, and the gate reads the head again. One
		// that fails (failure, or error: the CI could not run it) is a
		// failing check, the engine's next iteration, as a failing check
		// run is; a pending one says nothing yet.
		ev := forge.Event{Repo: p.Repository.repo(), HeadSHA: p.SHA, Name: p.Context, Summary: p.Description, URL: p.TargetURL}
		switch st := (forge.Status{State: forge.StatusState(p.State)}); {
		case st.State == forge.StatusSuccess:
			ev.Kind = forge.EventChecksPassed
		case st.Failing():
			ev.Kind, ev.Title, ev.At = forge.EventCheckFailed, "status "+p.State, p.UpdatedAt
		default:
			return forge.Event{}, forge.ErrIgnored
		}
		for _, b := range p.Branches {
			if ev.HeadRef == "" || strings.HasPrefix(b.Name, "aq/job/") {
				ev.HeadRef = b.Name
			}
		}
		return ev, nil
	case "pull_request":
		var p pullRequestPayload
		if err := json.Unmarshal(body, &p); err != nil || p.PullRequest == nil {
			return forge.Event{}, malformed(event, err)
		}
		if p.Action != "closed" {
			return forge.Event{}, forge.ErrIgnored
		}
		ev := forge.Event{Kind: forge.EventClosed, Repo: p.Repository.repo(), Number: p.PullRequest.Number,
			HeadRef: p.PullRequest.Head.Ref, HeadSHA: p.PullRequest.Head.SHA, URL: p.PullRequest.HTMLURL}
		if p.PullRequest.Merged {
			ev.Kind = forge.EventMerged
		}
		return ev, nil
	}
	return forge.Event{}, forge.ErrIgnored
}

// ErrMalformed: a signed body that is not the event's payload.
var ErrMalformed = errors.New("github: the payload is not the event's shape")

func malformed(event string, err error) error {
	if err != nil {
		return fmt.Errorf("%w (%s): %v", ErrMalformed, event, err)
	}
	return fmt.Errorf("%w (%s)", ErrMalformed, event)
}
