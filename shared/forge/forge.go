// Package forge is the code-forge port: where a delivered job's branch
// becomes a pull request, whose reviews and checks come back as the job's
// next iteration and whose merge is its ship (API.md "Pull requests").
// The types and the interface the coordinator uses are here; the adapters
// are named after what they wrap: forge/github (GitHub's REST API and
// webhooks), with room for Azure DevOps beside it.
package forge

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/gigafactory/fleet/shared/fleet"
)

// Repo is a repository on the forge, "owner/name".
type Repo struct{ Owner, Name string }

func (r Repo) String() string { return r.Owner + "/" + r.Name }

// ParseRepo reads "owner/name", both plain names.
func ParseRepo(field, s string) (Repo, error) {
	owner, name, ok := strings.Cut(s, "/")
	if !ok || strings.Contains(name, "/") {
		return Repo{}, fleet.Invalid(field, "%q is not owner/name", s)
	}
	if err := fleet.ValidateName(field, owner); err != nil {
		return Repo{}, err
	}
	if err := fleet.ValidateName(field, name); err != nil {
		return Repo{}, err
	}
	return Repo{Owner: owner, Name: name}, nil
}

// PullRequestSpec is the pull request a delivered job should have.
type PullRequestSpec struct {
	Repo Repo
	// Head is the job's branch (aq/job/<id>); Base the branch it merges
	// into, "" for the repository's default branch.
	Head, Base  string
	Title, Body string
}

// State is a pull request's state.
type State string

const (
	StateOpen   State = "open"
	StateClosed State = "closed"
	StateMerged State = "merged"
)

// PullRequest is what the forge says of one.
type PullRequest struct {
	Number  int
	URL     string
	HeadSHA string
	Base    string
	State   State
}

// MergeMethod is how a pull request is merged: the product's choice
// (fleet.ForgeConfig.MergeMethod).
type MergeMethod = fleet.MergeMethod

// Check is one CI check on a commit.
type Check struct {
	Name string
	// Completed is false while it runs; Conclusion is then "".
	Completed  bool
	Conclusion string
	// Title, Summary and Text are the check's output as the API gives it.
	Title, Summary, Text string
	URL                  string
}

// Failing reports whether a completed check's conclusion is a failure:
// failure, timed_out, cancelled or action_required (GitHub's
// conclusions; success, neutral and skipped pass).
func (c Check) Failing() bool {
	switch c.Conclusion {
	case "failure", "timed_out", "cancelled", "action_required":
		return c.Completed
	}
	return false
}

// Passed reports whether a check completed green: success, neutral or
// skipped, as GitHub's branch protection counts them. A check still
// running, failing, stale or with a conclusion this code does not know
// has not passed.
func (c Check) Passed() bool {
	switch c.Conclusion {
	case "success", "neutral", "skipped":
		return c.Completed
	}
	return false
}

// Failing reports whether a commit status says its check failed: failure,
// or error (the CI could not run it); pending says nothing yet.
func (s Status) Failing() bool { return s.State == StatusFailure || s.State == StatusError }

// StatusState is a commit status's state (GitHub's Status API, which CI
// systems such as Jenkins post instead of check runs).
type StatusState string

const (
	StatusPending StatusState = "pending"
	StatusSuccess StatusState = "success"
	StatusFailure StatusState = "failure"
	StatusError   StatusState = "error"
)

// Status is the latest commit status of one context on a commit.
type Status struct {
	Context     string
	State       StatusState
	Description string
	URL         string
}

// Forge is what the coordinator asks of a code forge.
type Forge interface {
	// EnsurePullRequest opens the pull request of spec's head, or finds
	// the open one and brings its title and body up to date. created says
	// which.
	EnsurePullRequest(ctx context.Context, spec PullRequestSpec) (pr PullRequest, created bool, err error)
	// Merge merges the pull request at sha (the head the fleet reviewed;
	// the forge refuses when it moved) with method. A refusal (not
	// mergeable, head moved, protection) is an *Error of KindRefused
	// carrying the forge's reason.
	Merge(ctx context.Context, repo Repo, number int, method MergeMethod, sha string) (mergedSHA string, err error)
	// DeleteBranch removes a branch; one already gone is not an error.
	DeleteBranch(ctx context.Context, repo Repo, branch string) error
	// Checks lists every check run on a commit, all pages of them.
	Checks(ctx context.Context, repo Repo, ref string) ([]Check, error)
	// Statuses lists the latest commit status of every context on a
	// commit, all pages of them.
	Statuses(ctx context.Context, repo Repo, ref string) ([]Status, error)
	// ReviewComments lists the comments a review left on the diff (the
	// first MaxReviewComments of them).
	ReviewComments(ctx context.Context, repo Repo, number int, reviewID int64) ([]ReviewComment, error)
}

// MaxReviewComments bounds the comments of one review read into an
// iteration's feedback.
const MaxReviewComments = 100

// ReviewComment is a review's comment on a line of the diff.
type ReviewComment struct {
	Path string
	// Line is the line of the file it is on (0: on an outdated diff, or
	// on the file).
	Line int
	Body string
	URL  string
}

// ErrorKind says what a failed forge call means for the caller.
type ErrorKind string

const (
	// KindTransient: the forge or the way to it failed; try again later.
	KindTransient ErrorKind = "transient"
	// KindRateLimited: the forge asks to wait (RetryAfter).
	KindRateLimited ErrorKind = "rate_limited"
	// KindAuth: the token is missing, wrong or lacks a permission.
	KindAuth ErrorKind = "auth"
	// KindNotFound: no such repository, pull request or branch.
	KindNotFound ErrorKind = "not_found"
	// KindRefused: the forge refused the request as it stands (a merge
	// that is not possible, a pull request it will not open).
	KindRefused ErrorKind = "refused"
)

// Error is a failed forge call.
type Error struct {
	Kind ErrorKind
	// Status is the HTTP status, 0 when none came back.
	Status int
	// Message is the forge's own reason (bounded plain text).
	Message    string
	RetryAfter time.Duration
	Err        error
}

func (e *Error) Error() string {
	s := "forge: " + string(e.Kind)
	if e.Status != 0 {
		s += fmt.Sprintf(" (HTTP %d)", e.Status)
	}
	if e.Message != "" {
		s += ": " + e.Message
	}
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

func (e *Error) Unwrap() error { return e.Err }

// KindOf is err's kind; an error that is not an *Error is transient.
func KindOf(err error) ErrorKind {
	if fe, ok := errors.AsType[*Error](err); ok {
		return fe.Kind
	}
	return KindTransient
}

// Retryable reports whether trying again later may succeed.
func Retryable(err error) bool {
	switch KindOf(err) {
	case KindTransient, KindRateLimited:
		return true
	}
	return false
}

// EventKind is what a verified webhook delivery says happened to a pull
// request.
type EventKind string

const (
	// EventApproved: a review approved the pull request.
	EventApproved EventKind = "approved"
	// EventChangesRequested: a review asked for changes.
	EventChangesRequested EventKind = "changes_requested"
	// EventCheckFailed: a check (or a suite) completed with a failing
	// conclusion on a commit, or a commit status failed on it (Name is the
	// status's context).
	EventCheckFailed EventKind = "check_failed"
	// EventChecksPassed: a check suite completed green on a commit, or a
	// commit status turned success on it (Name is the status's context).
	EventChecksPassed EventKind = "checks_passed"
	// EventClosed: the pull request was closed without a merge.
	EventClosed EventKind = "closed"
	// EventMerged: the pull request was merged (by anyone).
	EventMerged EventKind = "merged"
)

// Event is one webhook delivery, verified and read. Which job it is for is
// the coordinator's to find: HeadRef is the job's branch (aq/job/<id>).
type Event struct {
	Kind EventKind
	Repo Repo
	// Number is the pull request's; HeadRef and HeadSHA its head (a check
	// names the commit, and the pull requests it ran for, if any).
	Number  int
	HeadRef string
	HeadSHA string
	// Author is the reviewer's login (reviews), the app that ran a check.
	Author string
	// Member says a review's author is the repository's owner, a member
	// of its organization or a collaborator on it. Anyone who can read a
	// repository can review its pull requests (on a public one, anyone at
	// all): only a member's review is acted on.
	Member bool
	// ReviewID is a review's, for its comments on the diff.
	ReviewID int64
	// Suite says a failing check is a check suite, whose webhook carries
	// no output of its own.
	Suite bool
	// Body is the review's text; for a check, Name, Title, Summary and
	// Text are its output.
	Body                 string
	Name, Title, Summary string
	Text                 string
	URL                  string
	At                   time.Time
}

// ErrIgnored: a delivery of an event (or an action) the fleet does not
// act on. It is answered 204, as GitHub expects of a hook it sends
// everything to.
var ErrIgnored = errors.New("forge: event not acted on")
