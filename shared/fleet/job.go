package fleet

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"
)

// Priority orders jobs; critical jobs may preempt lower ones.
type Priority string

// Priorities, lowest first.
const (
	PriorityLow      Priority = "low"
	PriorityNormal   Priority = "normal"
	PriorityHigh     Priority = "high"
	PriorityCritical Priority = "critical"
)

// Rank orders priorities: low 0 … critical 3; unknown ranks as normal.
func (p Priority) Rank() int {
	switch p {
	case PriorityLow:
		return 0
	case PriorityHigh:
		return 2
	case PriorityCritical:
		return 3
	default:
		return 1
	}
}

// Priorities lists every priority, lowest first.
func Priorities() []Priority {
	return []Priority{PriorityLow, PriorityNormal, PriorityHigh, PriorityCritical}
}

// PrioritiesHighestFirst lists every priority from the highest rank down.
func PrioritiesHighestFirst() []Priority {
	p := Priorities()
	slices.Reverse(p)
	return p
}

// ParsePriority validates a priority; "" means normal.
func ParsePriority(field, s string) (Priority, error) {
	switch p := Priority(s); {
	case p == "":
		return PriorityNormal, nil
	case slices.Contains(Priorities(), p):
		return p, nil
	}
	return "", Invalid(field, "unknown priority %q (want %s)", s, alternatives(Priorities()))
}

// DepsMode says when a job's dependencies are satisfied.
type DepsMode string

// Dependency modes.
const (
	DepsAll DepsMode = "all" // every dependency shipped (default)
	DepsAny DepsMode = "any" // at least one shipped
)

// DepsModes lists every dependency mode.
func DepsModes() []DepsMode { return []DepsMode{DepsAll, DepsAny} }

// Duration is a time.Duration that reads and writes Go duration strings
// ("45m") in JSON, as manifests and clients write them.
type Duration time.Duration

// MarshalJSON writes "45m0s".
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(d).String()) }

// UnmarshalJSON reads a Go duration string.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("duration must be a string such as \"45m\": %w", err)
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return err
	}
	*d = Duration(v)
	return nil
}

// Budget caps one job.
type Budget struct {
	Wall Duration `json:"wall,omitempty"`
	USD  float64  `json:"usd,omitempty"`
}

// JobKind says what a job's own step is.
type JobKind string

// Job kinds. A task (the default, stored as "") runs its own step; a
// composite job ships at once when every one of its children has shipped.
const (
	KindTask      JobKind = ""
	KindComposite JobKind = "composite"
)

// JobKinds lists every job kind, the task's "" first.
func JobKinds() []JobKind { return []JobKind{KindTask, KindComposite} }

// Lease is the single-holder lease on a job, as clients see it. It is stored
// as fields of the job document so that claiming is one compare-and-swap.
type Lease struct {
	JobID           string    `json:"jobId"`
	HolderFactoryID string    `json:"holderFactoryId"`
	LeaseEpoch      int64     `json:"leaseEpoch"`
	ExpiresAt       time.Time `json:"leaseExpiresAt"`
}

// Dispatch records the dispatcher's last decision for the job.
type Dispatch struct {
	// At is when the message for the current dispatchEpoch was published (or,
	// when Unroutable is set, when routing was last tried).
	At time.Time `json:"at,omitzero"`
	// Unroutable explains why no factory was eligible at the last attempt;
	// UnroutableKind says which kind of reason it is.
	Unroutable     string         `json:"unroutable,omitempty"`
	UnroutableKind UnroutableKind `json:"unroutableKind,omitempty"`
	// DeadLettered counts dispatch messages of this job the broker gave up on.
	DeadLettered int `json:"deadLettered,omitempty"`
}

// UnroutableKind classifies why no factory could take a job.
type UnroutableKind string

// Kinds of unroutable reason.
const (
	// UnroutableNoFactory: nothing in the fleet could run the job (no
	// factory enrolled, or a capability nobody has); it needs a change.
	UnroutableNoFactory UnroutableKind = "no_factory"
	// UnroutableBusy: factories could run the job, but none can now (seats
	// full, down, out of scope); a passing state whose counts move with
	// every heartbeat.
	UnroutableBusy UnroutableKind = "busy"
	// UnroutableBudget: the product's budget holds the job back (paused,
	// or no room under the ceiling); it flows when the budget makes room.
	UnroutableBudget UnroutableKind = "budget"
	// UnroutableSeatCap: the product runs as many jobs as its maxRunning
	// allows; it flows when one of them ends.
	UnroutableSeatCap UnroutableKind = "seat_cap"
)

// UnroutableKinds lists every kind of unroutable reason.
func UnroutableKinds() []UnroutableKind {
	return []UnroutableKind{UnroutableNoFactory, UnroutableBusy, UnroutableBudget, UnroutableSeatCap}
}

// Failure is the last failure a factory reported.
type Failure struct {
	Reason string `json:"reason"`
	// Kind classifies the failure when the holder named one.
	Kind      FailureKind `json:"kind,omitempty"`
	Retryable bool        `json:"retryable"`
	FactoryID string      `json:"factoryId,omitempty"`
	At        time.Time   `json:"at"`
}

// FailureKind classifies a holder's failure report (POST /fleet/fail
// {kind}); the reason text says the rest.
type FailureKind string

const (
	FailBudget          FailureKind = "budget_exceeded"
	FailCrash           FailureKind = "crash"
	FailNoEngine        FailureKind = "no_engine"
	FailGit             FailureKind = "git_error"
	FailShipHook        FailureKind = "ship_hook_failed"
	FailInvalidJob      FailureKind = "invalid_job"
	FailInvalidChildren FailureKind = "invalid_children"
	// FailEngineIdle: the watchdog stopped an engine that printed nothing
	// for the idle timeout.
	FailEngineIdle FailureKind = "engine_idle"
	// FailRateLimited: the engine's provider refused it for a rate limit.
	// The run spends no attempt: the account, not the job, was at fault.
	FailRateLimited FailureKind = "rate_limited"
	// FailEngineError: a structured engine's own result said it failed
	// (Claude is_error, Codex turn.failed).
	FailEngineError FailureKind = "engine_error"
)

// FailureKinds lists every failure kind.
func FailureKinds() []FailureKind {
	return []FailureKind{FailBudget, FailCrash, FailNoEngine, FailGit, FailShipHook, FailInvalidJob,
		FailInvalidChildren, FailEngineIdle, FailRateLimited, FailEngineError}
}

// ParseFailureKind accepts "" (none named) or one of FailureKinds.
func ParseFailureKind(field, s string) (FailureKind, error) {
	k := FailureKind(s)
	if k == "" || slices.Contains(FailureKinds(), k) {
		return k, nil
	}
	return "", Invalid(field, "unknown failure kind %q (want %s)", s, alternatives(FailureKinds()))
}

// SpendsAttempt reports whether a retryable failure of this kind counts
// against the job's attempts. A rate limit says nothing about the job.
func (k FailureKind) SpendsAttempt() bool { return k != FailRateLimited }

// Job is one unit of work. Rev is the store revision, carried for CAS and
// never serialised into the document.
type Job struct {
	ID           string   `json:"id"`
	ProductID    string   `json:"productId"`
	Title        string   `json:"title"`
	Repo         string   `json:"repo"`
	Capabilities []string `json:"capabilities"`
	Persona      string   `json:"persona,omitempty"`
	Kind         JobKind  `json:"kind,omitempty"`
	// Profile is the persona's version as submitted; nil without a persona.
	Profile         *JobProfile `json:"profile,omitempty"`
	Priority        Priority    `json:"priority"`
	Stage           Stage       `json:"stage"`
	Body            string      `json:"body"`
	LeaseEpoch      int64       `json:"leaseEpoch"`
	HolderFactoryID string      `json:"holderFactoryId,omitempty"` // "" when no lease is held
	LeaseExpiresAt  time.Time   `json:"leaseExpiresAt,omitzero"`
	LeaseAcquiredAt time.Time   `json:"leaseAcquiredAt,omitzero"`
	// ClaimRequestID is the client's id of the poll claim that took the
	// current lease: the same claim retried gets this lease back.
	ClaimRequestID string `json:"claimRequestId,omitempty"`
	DispatchEpoch  int64  `json:"dispatchEpoch"`
	// TargetFactoryID is "" while the job awaits a dispatch decision; kept in
	// the document even when empty so queries can select on it.
	TargetFactoryID string   `json:"targetFactoryId"`
	Dispatch        Dispatch `json:"dispatch"`
	Checkpoint      string   `json:"checkpoint,omitempty"`
	// CancelRequested and PreemptRequested are commands to the holder of
	// the lease (API.md, "Cancel and preemption"): stop the engine,
	// checkpoint and release with outcome cancelled or preempted. The
	// holder learns of them from a control message on its subscription
	// and from every renewal; StopRequestedAt starts the grace after which
	// the coordinator revokes the lease itself. They end with the lease.
	CancelRequested  bool      `json:"cancelRequested,omitempty"`
	PreemptRequested bool      `json:"preemptRequested,omitempty"`
	StopRequestedAt  time.Time `json:"stopRequestedAt,omitzero"`
	// PreemptedBy is the critical job the holder is asked to make way for.
	PreemptedBy *JobRef   `json:"preemptedBy,omitempty"`
	Attempts    int       `json:"attempts"`
	MaxAttempts int       `json:"maxAttempts"`
	NotBefore   time.Time `json:"notBefore,omitzero"`
	LastFailure *Failure  `json:"lastFailure,omitempty"`
	ParentID    string    `json:"parentId,omitempty"`
	// RootID is the root of the job's tree of children (absent on a root);
	// Depth is how far below it the job is (0 for a root).
	RootID string `json:"rootId,omitempty"`
	Depth  int    `json:"depth,omitempty"`
	// Children are the jobs posted as this job's children, in post order:
	// while blocked with children, the job waits until every one shipped.
	Children []string `json:"children,omitempty"`
	Deps     []string `json:"deps"`
	DepsMode DepsMode `json:"depsMode"`
	// HasDependants is set when another job waits on this one, so shipping a
	// job nobody waits for costs no query for dependants.
	HasDependants  bool    `json:"hasDependants,omitempty"`
	Budget         Budget  `json:"budget"`
	Review         *Review `json:"review,omitempty"`
	IdempotencyKey string  `json:"idempotencyKey,omitempty"`
	// Tracker is the tracker item the job was ingested from (nil for a
	// job submitted otherwise); its events are echoed to the product's
	// tracker webhook.
	Tracker *TrackerRef `json:"tracker,omitempty"`
	// Report is what the holder reported about its run (usage, engine,
	// delivered head); it names its lease epoch and is replaced when the
	// next run starts, so it survives into the run document even if the
	// process ends between the release and the run's write.
	Report *RunReport `json:"runReport,omitempty"`
	// Admitted is what the assignment of the current lease took from its
	// product (a budget reservation, a seat), recorded by the CAS that
	// granted the lease, so the lease's end gives back only what was
	// taken and an uncapped, unbudgeted product's run reads nothing then.
	Admitted *Admitted `json:"admitted,omitempty"`
	// QueuedAt is when the job last entered queued; the scheduler ages from it.
	QueuedAt time.Time `json:"queuedAt,omitzero"`
	EventSeq int64     `json:"eventSeq"`
	// RecentEvents are the job's latest events (seq EventSeq and the few
	// before it), committed in the same write as the changes they record:
	// the job and its events container are two documents with no
	// transaction between them, so an event written only after the job
	// could be lost. Entries omit id, jobId and productId (the job's);
	// Recent fills them in. See coord/events.go for how the ring is kept.
	RecentEvents []Event `json:"recentEvents,omitempty"`
	// Runs are the job's ended runs, oldest first, each written by the
	// same CAS that ended it (no second document per run). Past
	// RunsKept the oldest move to the runs container (coord's transition).
	Runs      []Run     `json:"runs,omitempty"`
	CreatedAt time.Time `json:"createdAt"`
	UpdatedAt time.Time `json:"updatedAt"`

	Rev string `json:"-"`
	// PullRequest is the job's pull request on its product's forge, once
	// a delivery opened it.
	PullRequest *PullRequest `json:"pullRequest,omitempty"`
	// Iteration counts the deliveries the forge's feedback asked for: 0 or
	// 1 for the first, one more for each changes-requested review or
	// failing check that sent the job back.
	Iteration int `json:"iteration,omitempty"`
	// Feedback is what came back from the forge, the newest last.
	Feedback []Feedback `json:"feedback,omitempty"`
	// PRSync is set while the job's pull request waits to be opened or
	// updated after a delivery; ForgeDue with it, a top-level flag the
	// forge sweep selects on.
	PRSync   *PRSync `json:"prSync,omitempty"`
	ForgeDue bool    `json:"forgeDue,omitempty"`
	// ForgeDeliveries are the webhook deliveries already applied (ids and
	// body digests), so a redelivery or a replay changes nothing.
	ForgeDeliveries []string `json:"forgeDeliveries,omitempty"`
}

// Admitted is what one lease's assignment took.
type Admitted struct {
	LeaseEpoch  int64 `json:"leaseEpoch"`
	Reservation bool  `json:"reservation,omitempty"`
	Seat        bool  `json:"seat,omitempty"`
}

// AdmittedFor is what the lease at epoch took; ok is false when the job
// does not say (a lease granted before jobs recorded it).
func (j *Job) AdmittedFor(epoch int64) (a Admitted, ok bool) {
	if j.Admitted == nil || j.Admitted.LeaseEpoch != epoch {
		return Admitted{}, false
	}
	return *j.Admitted, true
}

// JobRef names a job in its product.
type JobRef struct {
	ProductID string `json:"productId"`
	JobID     string `json:"jobId"`
}

// Lease returns the job's lease and whether one is held.
func (j *Job) Lease() (Lease, bool) {
	if j.HolderFactoryID == "" {
		return Lease{}, false
	}
	return Lease{JobID: j.ID, HolderFactoryID: j.HolderFactoryID, LeaseEpoch: j.LeaseEpoch, ExpiresAt: j.LeaseExpiresAt}, true
}

// LeaseExpired reports whether a held lease has run out at now.
func (j *Job) LeaseExpired(now time.Time) bool {
	return j.HolderFactoryID != "" && !now.Before(j.LeaseExpiresAt)
}

// StopRequested reports whether the holder has been asked to stop (cancel
// or preemption) and has not yet answered.
func (j *Job) StopRequested() bool { return j.CancelRequested || j.PreemptRequested }

// StopOverdue reports whether a stop request has gone unacknowledged past
// grace at now, or the lease it was addressed to has expired: the
// coordinator then revokes the lease itself.
func (j *Job) StopOverdue(now time.Time, grace time.Duration) bool {
	if !j.StopRequested() || !j.Stage.Leased() {
		return false
	}
	return !now.Before(j.StopRequestedAt.Add(grace)) || j.LeaseExpired(now)
}

// ClearStopRequest forgets a stop request (its lease ended).
func (j *Job) ClearStopRequest() {
	j.CancelRequested, j.PreemptRequested, j.StopRequestedAt, j.PreemptedBy = false, false, time.Time{}, nil
}

// RetryStage is the one retry-or-dead-letter rule: where a job goes when
// an attempt is lost (lease expired) or fails retryably. Queued while
// attempts remain; dead_letter when the attempt now counted was the last.
func (j *Job) RetryStage() Stage {
	if j.Attempts+1 >= j.MaxAttempts {
		return StageDeadLetter
	}
	return StageQueued
}

// CheckFence returns ErrFenced unless factoryID holds the lease at leaseEpoch.
// It is the one fencing check every worker mutation goes through.
func (j *Job) CheckFence(factoryID string, leaseEpoch int64) error {
	switch {
	case j.HolderFactoryID == "" || !j.Stage.Leased():
		return &Error{Code: CodeFenced, Message: fmt.Sprintf("job %s holds no lease (stage %s)", j.ID, j.Stage)}
	case leaseEpoch != j.LeaseEpoch:
		return &Error{Code: CodeFenced, Message: fmt.Sprintf("leaseEpoch %d is stale: job %s is at epoch %d", leaseEpoch, j.ID, j.LeaseEpoch)}
	case j.HolderFactoryID != factoryID:
		return &Error{Code: CodeFenced, Message: fmt.Sprintf("job %s is held by another factory", j.ID)}
	}
	return nil
}

// Apply moves the job along rule at now. Lease acquisition takes the factory
// and lease length; other effects ignore them. It is the only place a job's
// stage and lease change together.
func (j *Job) Apply(rule Rule, now time.Time, factoryID string, ttl time.Duration) {
	j.Stage = rule.To
	if rule.Lease != LeaseKeep && rule.Lease != LeaseNone {
		// A request id names one lease; the claim that takes a new one
		// sets its own after Apply.
		j.ClaimRequestID = ""
	}
	switch rule.Lease {
	case LeaseAcquire:
		j.LeaseEpoch++
		j.HolderFactoryID, j.LeaseExpiresAt, j.LeaseAcquiredAt = factoryID, now.Add(ttl), now
	case LeaseRelease:
		j.HolderFactoryID, j.LeaseExpiresAt, j.LeaseAcquiredAt = "", time.Time{}, time.Time{}
	case LeaseRevoke:
		j.LeaseEpoch++
		j.HolderFactoryID, j.LeaseExpiresAt, j.LeaseAcquiredAt = "", time.Time{}, time.Time{}
	}
	if rule.Lease == LeaseRelease || rule.Lease == LeaseRevoke {
		// A stop request is addressed to one lease: the next run starts
		// with none.
		j.ClearStopRequest()
	}
	if rule.To == StageQueued {
		j.QueuedAt = now
		// A job back in the queue needs a fresh dispatch decision; the
		// dispatcher bumps dispatchEpoch when it makes one, which voids any
		// message still in flight for the old epoch.
		j.TargetFactoryID = ""
		j.Dispatch = Dispatch{DeadLettered: j.Dispatch.DeadLettered}
	}
	j.UpdatedAt = now
}

// RunResult is how a run ended.
type RunResult string

// Run results.
const (
	RunRunning   RunResult = "running"
	RunSucceeded RunResult = "succeeded"
	RunFailed    RunResult = "failed"
	RunLost      RunResult = "lost" // lease expired or revoked
	// RunCancelled: stopped by an operator's cancel, acknowledged or forced.
	RunCancelled RunResult = "cancelled"
	// RunPreempted: stopped to make way for a critical job; the job went
	// back to the queue without spending an attempt.
	RunPreempted RunResult = "preempted"
)

// RunResults lists every run result.
func RunResults() []RunResult {
	return []RunResult{RunRunning, RunSucceeded, RunFailed, RunLost, RunCancelled, RunPreempted}
}

// ReleaseOutcome is why a holder gives its lease back (the outcome of
// POST /fleet/jobs/{id}/lease/release).
type ReleaseOutcome string

// Release outcomes. The empty one is a plain release: back to the queue.
const (
	ReleasePlain     ReleaseOutcome = ""
	ReleaseCancelled ReleaseOutcome = "cancelled"
	ReleasePreempted ReleaseOutcome = "preempted"
)

// ReleaseOutcomes lists every release outcome, the plain release's "" first.
func ReleaseOutcomes() []ReleaseOutcome {
	return []ReleaseOutcome{ReleasePlain, ReleaseCancelled, ReleasePreempted}
}

// ParseReleaseOutcome validates a release outcome.
func ParseReleaseOutcome(field, s string) (ReleaseOutcome, error) {
	if o := ReleaseOutcome(s); slices.Contains(ReleaseOutcomes(), o) {
		return o, nil
	}
	var named []string
	for _, o := range ReleaseOutcomes() {
		if o != ReleasePlain {
			named = append(named, string(o))
		}
	}
	return "", Invalid(field, "unknown outcome %q (want %s, or none for a plain release)", s, strings.Join(named, ", "))
}

// Run is one attempt at a job by one factory, from claim to release.
type Run struct {
	ID         string    `json:"id"`
	JobID      string    `json:"jobId"`
	ProductID  string    `json:"productId"`
	FactoryID  string    `json:"factoryId"`
	LeaseEpoch int64     `json:"leaseEpoch"`
	Result     RunResult `json:"result"`
	Reason     string    `json:"reason,omitempty"`
	StartedAt  time.Time `json:"startedAt"`
	EndedAt    time.Time `json:"endedAt,omitzero"`
	Engine     string    `json:"engine,omitempty"`
	Usage      Usage     `json:"usage"`
	Head       string    `json:"head,omitempty"`
	Diff       *DiffStat `json:"diff,omitempty"`
	EngineFacts
}

// SessionFactory is the factory holding the job's engine session: the one
// that ran its newest ended run reporting a session, or "". Only there can
// a retry resume it (engines keep sessions on the machine that ran them).
func (j *Job) SessionFactory() string {
	for i := len(j.Runs) - 1; i >= 0; i-- {
		if r := j.Runs[i]; r.Session != "" {
			return r.FactoryID
		}
	}
	return ""
}

// RunsKept is how many ended runs a job document holds.
const RunsKept = 16

// RunOf is the run the lease of j (the job as it was before the move that
// ended the lease) ends with: who ran it, when, and what its holder
// reported. endedAt is zero for the run in progress.
func RunOf(j *Job, result RunResult, reason string, endedAt time.Time) Run {
	run := Run{
		ID: RunID(j.ID, j.LeaseEpoch), JobID: j.ID, ProductID: j.ProductID,
		FactoryID: j.HolderFactoryID, LeaseEpoch: j.LeaseEpoch, Result: result, Reason: reason,
		StartedAt: j.LeaseAcquiredAt, EndedAt: endedAt,
	}
	if r := j.ReportFor(run.LeaseEpoch); r != nil {
		run.Engine, run.Usage, run.Head = r.Engine, r.Usage, r.Head
		if r.Diff != nil {
			d := *r.Diff
			run.Diff = &d
		}
		run.EngineFacts.Merge(r.EngineFacts)
	}
	return run
}

// EndRun records an ended run on the job and returns the runs that no
// longer fit (oldest first), for the caller to keep elsewhere.
func (j *Job) EndRun(r Run) (spilled []Run) {
	j.Runs = append(slices.Clone(j.Runs), r)
	if n := len(j.Runs) - RunsKept; n > 0 {
		spilled = slices.Clone(j.Runs[:n])
		j.Runs = slices.Clone(j.Runs[n:])
	}
	return spilled
}

// RunAt is the ended run of the lease at epoch the job still holds.
func (j *Job) RunAt(epoch int64) (Run, bool) {
	for _, r := range j.Runs {
		if r.LeaseEpoch == epoch {
			return r, true
		}
	}
	return Run{}, false
}

// RunID names the run of job at leaseEpoch: one run per lease.
func RunID(jobID string, leaseEpoch int64) string { return fmt.Sprintf("%s:%d", jobID, leaseEpoch) }

// Event is one entry of a job's append-only audit stream.
type Event struct {
	// ID, JobID and ProductID are left out of a job's RecentEvents only.
	ID        string          `json:"id,omitempty"` // jobId:seq
	JobID     string          `json:"jobId,omitempty"`
	ProductID string          `json:"productId,omitempty"`
	Seq       int64           `json:"seq"`
	Type      EventType       `json:"type"`
	From      Stage           `json:"from,omitempty"`
	To        Stage           `json:"to,omitempty"`
	Actor     Actor           `json:"actor"`
	ActorID   string          `json:"actorId,omitempty"`
	Message   string          `json:"message,omitempty"`
	Data      json.RawMessage `json:"data,omitempty"`
	At        time.Time       `json:"at"`
}

// EventType is what an event records.
type EventType string

// Event types: the one list (EventTypes) the API publishes.
const (
	EventSubmitted        EventType = "submitted"
	EventStage            EventType = "stage" // a holder's fenced stage move
	EventClaimed          EventType = "claimed"
	EventReleased         EventType = "released"
	EventFailed           EventType = "failed"
	EventLeaseExpired     EventType = "lease_expired"
	EventUnblocked        EventType = "unblocked"
	EventDependencyFailed EventType = "dependency_failed"
	// EventChildren: children were posted to the job, which now waits for them.
	EventChildren EventType = "children"
	// Review gate: a request (new reviewers, quorum or head) and a vote.
	EventReviewRequested EventType = "review_requested"
	EventReviewVote      EventType = "review_vote"
	// An operator's action, named after it.
	EventShip    EventType = "ship"
	EventRequeue EventType = "requeue"
	EventReject  EventType = "reject"
	EventCancel  EventType = "cancel"
	// Cancel of a leased job: requested (the job stays with its holder),
	// then acknowledged by the holder's release or forced after the grace.
	EventCancelRequested    EventType = "cancel_requested"
	EventCancelAcknowledged EventType = "cancel_acknowledged"
	EventCancelForced       EventType = "cancel_forced"
	// Preemption: preempted_by on the victim names the critical job it
	// makes way for, preempted on the critical job names the victim; the
	// victim's release is acknowledged or forced like a cancel.
	EventPreemptedBy         EventType = "preempted_by"
	EventPreempted           EventType = "preempted"
	EventPreemptAcknowledged EventType = "preempt_acknowledged"
	EventPreemptForced       EventType = "preempt_forced"
	// An artifact's pointer added to or removed from the job.
	EventArtifactAdded   EventType = "artifact_added"
	EventArtifactDeleted EventType = "artifact_deleted"
	// EventUsage: the holder reported its run's usage (cumulative).
	EventUsage EventType = "usage"
	// EventTrackerUpdated: a newer revision of the tracker item replaced
	// what the job (not started yet) will run.
	EventTrackerUpdated EventType = "tracker_updated"
	// EventEchoResend: an operator asked for every event of the job to be
	// sent to the tracker webhook again.
	EventEchoResend EventType = "echo_resend"
	// EventPROpened and EventPRUpdated: the job's pull request was opened,
	// or brought up to date after another delivery.
	EventPROpened  EventType = "pr_opened"
	EventPRUpdated EventType = "pr_updated"
	// EventIteration: the forge's feedback (a review asking for changes, a
	// failing check) sent the job back for another iteration.
	EventIteration EventType = "iteration"
	// EventIterationCap: feedback came past the product's maxIterations;
	// the job stays where it is for a person to decide.
	EventIterationCap EventType = "iteration_cap"
	// EventMergeRefused: the forge refused to merge the job's pull request.
	EventMergeRefused EventType = "merge_refused"
)

// EventTypes lists every event type.
var EventTypes = []EventType{
	EventSubmitted, EventStage, EventClaimed, EventReleased, EventFailed, EventLeaseExpired,
	EventUnblocked, EventDependencyFailed, EventShip, EventRequeue, EventReject, EventCancel,
	EventChildren, EventReviewRequested, EventReviewVote,
	EventCancelRequested, EventCancelAcknowledged, EventCancelForced,
	EventPreemptedBy, EventPreempted, EventPreemptAcknowledged, EventPreemptForced,
	EventArtifactAdded, EventArtifactDeleted,
	EventUsage, EventTrackerUpdated, EventEchoResend,
	EventPROpened, EventPRUpdated, EventIteration, EventIterationCap, EventMergeRefused,
}

// EventID names the event seq of a job.
func EventID(jobID string, seq int64) string { return fmt.Sprintf("%s:%012d", jobID, seq) }

// RecordEvent gives ev the job's next seq and keeps it in RecentEvents;
// the caller writes the job. ev.At defaults to UpdatedAt. It returns the
// event whole.
func (j *Job) RecordEvent(ev Event) Event {
	j.EventSeq++
	ev.Seq = j.EventSeq
	if ev.At.IsZero() {
		ev.At = j.UpdatedAt
	}
	ev.ID, ev.JobID, ev.ProductID = "", "", ""
	j.RecentEvents = append(j.RecentEvents, ev)
	return j.whole(ev)
}

// Recent returns RecentEvents whole, oldest first.
func (j *Job) Recent() []Event {
	out := make([]Event, len(j.RecentEvents))
	for i, ev := range j.RecentEvents {
		out[i] = j.whole(ev)
	}
	return out
}

// LatestEvent is the event of the job's last recorded change, if the job
// still holds it.
func (j *Job) LatestEvent() (Event, bool) {
	if n := len(j.RecentEvents); n > 0 && j.RecentEvents[n-1].Seq == j.EventSeq {
		return j.whole(j.RecentEvents[n-1]), true
	}
	return Event{}, false
}

func (j *Job) whole(ev Event) Event {
	ev.ID, ev.JobID, ev.ProductID = EventID(j.ID, ev.Seq), j.ID, j.ProductID
	return ev
}
