package fleet

import (
	"strconv"
	"strings"
	"time"
)

// AlertKind names a condition an operator should look at (API.md, "Metrics
// and alerts").
type AlertKind string

// Alert kinds. Budget and cancel alerts come with budgets and acknowledged
// cancel.
const (
	// AlertStarving: the oldest queued job of a product and repo has waited
	// past the starvation bound.
	AlertStarving AlertKind = "starving"
	// AlertStaleFactory: a factory has been silent past StaleAfter (warning)
	// or DownAfter (critical).
	AlertStaleFactory AlertKind = "stale_factory"
	// AlertDeadLetter: a job used up its attempts and waits for an operator.
	AlertDeadLetter AlertKind = "dead_letter"
	// AlertFailed: a job failed (a terminal failure, a rejection) in the
	// last 24 hours.
	AlertFailed AlertKind = "failed"
	// AlertNoFactory: no enrolled factory could ever run a queued job (a
	// capability or repo nobody offers), said from its submit on rather
	// than once it starves.
	AlertNoFactory AlertKind = "no_factory"
	// AlertBlockedOnFailed: a blocked job waits on a dependency that ended
	// unshipped; the sweep fails it (dependency_failed).
	AlertBlockedOnFailed AlertKind = "blocked_on_failed"
	// AlertCancelUnacknowledged: the holder of a cancelled job has not
	// acknowledged the cancel yet; the coordinator forces it after the grace.
	AlertCancelUnacknowledged AlertKind = "cancel_unacknowledged"
	// AlertBudgetAlert: a product's spend reached alertAt of its ceiling.
	AlertBudgetAlert AlertKind = "budget_alert"
	// AlertBudgetPaused: a product is paused (spend at the ceiling, or an
	// operator); its queued jobs wait.
	AlertBudgetPaused AlertKind = "budget_paused"
	// AlertIterationCap: a delivered job's pull request asked for another
	// iteration past its product's maxIterations; a person decides.
	AlertIterationCap AlertKind = "iteration_cap"
	// AlertForgeFailing: a delivered job's pull request could not be
	// opened or updated, several times in a row; the forge is retried.
	AlertForgeFailing AlertKind = "forge_failing"
	// AlertUndecodable: listings and sweeps of this instance passed over a
	// stored document that does not decode (edited by hand, or written by
	// a version with other field types); a person repairs or deletes it.
	AlertUndecodable AlertKind = "undecodable_documents"
)

// AlertKinds lists every alert kind.
func AlertKinds() []AlertKind {
	return []AlertKind{AlertStarving, AlertStaleFactory, AlertDeadLetter, AlertFailed, AlertNoFactory, AlertBlockedOnFailed,
		AlertCancelUnacknowledged, AlertBudgetAlert, AlertBudgetPaused, AlertIterationCap, AlertForgeFailing, AlertUndecodable}
}

// Severity ranks alerts.
type Severity string

// Severities.
const (
	SeverityWarning  Severity = "warning"
	SeverityCritical Severity = "critical"
)

// Severities lists every severity, the lesser first.
func Severities() []Severity { return []Severity{SeverityWarning, SeverityCritical} }

// Alert is one open condition: what kind, how bad, what it is about
// ("product/repo", a factory id, "product/job"), since when, and a sentence
// for a person.
type Alert struct {
	Kind     AlertKind `json:"kind"`
	Severity Severity  `json:"severity"`
	Subject  string    `json:"subject"`
	Since    time.Time `json:"since"`
	Message  string    `json:"message"`
}

// EndedAlert is the alert of a job that dead-lettered or failed.
func EndedAlert(j *Job) Alert {
	a := Alert{Kind: AlertDeadLetter, Severity: SeverityCritical, Subject: j.ProductID + "/" + j.ID, Since: j.UpdatedAt,
		Message: "dead-lettered after " + strconv.Itoa(j.Attempts) + " attempt(s); requeue or cancel it"}
	if j.Stage == StageFailed {
		a.Kind, a.Severity, a.Message = AlertFailed, SeverityWarning, "job "+j.ID+" failed"
		if f := j.LastFailure; f != nil && !f.At.Before(j.UpdatedAt) {
			// The failure that ended it (an older one of a job rejected
			// since would name the wrong cause).
			a.Message += " on " + f.FactoryID + ": " + firstLine(f.Reason, 160)
		} else {
			a.Message += " (its events say why)"
		}
		a.Message += "; requeue it to try again"
	}
	return a
}

// firstLine is the first non-empty line of s, at most n runes: an engine's
// reason may be pages of output.
func firstLine(s string, n int) string {
	for l := range strings.Lines(s) {
		if l = strings.TrimSpace(l); l != "" {
			if r := []rune(l); len(r) > n {
				return string(r[:n-1]) + "…"
			}
			return l
		}
	}
	return ""
}
