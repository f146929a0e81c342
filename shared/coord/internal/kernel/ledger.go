package kernel

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/gigafactory/fleet/shared/store"
)

// The ledger is one small document (container Ledger, id ledgerID) of
// monotonic counters. It lets a timer sweep that has nothing to do find that
// out with one point read instead of a query, and lets every process learn
// of a token revocation with one point read per TokenCacheTTL whatever the
// number of factories. Counters only move by the store's atomic Increment
// (a Cosmos patch), so no hot path takes part in a CAS on it.
//
//   - activity moves after a change-feed batch that held a non-terminal
//     job was handled (DispatchChanged), when a sweep armed it at its
//     current value (Bump; below). The feed is at-least-once and
//     checkpointed after the handler returns, so every job write is
//     followed by that conditional bump: a crash before it redelivers the
//     batch, which bumps then.
//   - ended moves likewise for batches that held a terminal job (GC's work).
//   - tokens moves on every revocation, rotation and deregistration.
//
// A sweep that scans first arms its counter: it writes the value n it read
// into the counter's armed field (activityArmed, endedArmed), with a CAS on
// the revision of that read, unless a sweep armed it at n already. If the
// scan finds nothing, it records n as its quiet mark, with a CAS on the
// revision it armed at. Why a later tick may then skip: a job the scan
// missed was written after the scan began (else the scan would see it), so
// after the arm, and its batch's bump comes after that write: it finds
// the counter still at n and armed at n (the counter only moves by a bump,
// and a bump leaves it above its armed value), or already past n; either
// way the counter no longer equals the mark once the bump is done (the
// mark's CAS fails if the bump came first; the next tick sees a larger
// counter if it came later). A bump finding the counter above its armed
// value writes nothing: no sweep armed since the last bump, so no mark can
// equal the counter, and a sweep arming from now on scans after that
// job's write. That is what keeps the feed's batches off the ledger at
// steady load: one bump per arming tick instead of one per batch (issue
// 25). Time alone never puts a job into a sweep's stages, so "none there
// at counter n" stays true while the counter is n. Two bounds cover what
// the argument assumes: a bump the host gave up on (it checkpoints past a
// batch that failed all its retries) and a query served by a replica
// behind the ledger's (Cosmos Session consistency across instances): a
// mark older than QuietRescanAfter is not trusted, so such a job waits at
// most that long. A mark without Armed (a process of an older version,
// which bumped after every batch) is not trusted against an armed
// counter.
//
// Only a coordinator whose job writes are seen by a change feed running
// DispatchChanged may trust the marks (Config.ChangeFeed); without one
// (the Lambda front door) every sweep scans, as before.
//
// The stale-factory prune is the one sweep that time alone gives work: a
// factory becomes prunable by staying silent. Its mark is kept against no
// counter but carries Until, the earliest time any factory could become
// prunable, and is trusted only before then. Why that holds without a
// counter: a factory present at the scan was seen, and Until is at most its
// due time; one enrolled (or heard from) after the ledger read has its last
// sign of life after that read, so it falls due no earlier than read time +
// the prune threshold, which bounds Until too (catalog/prune.go). A
// heartbeat only moves a due time later. QuietRescanAfter still bounds the
// mark (a changed threshold, a replica behind).

// Ledger identity: one document, partition key = id.
const ledgerID = "fleet"

// QuietRescanAfter bounds how long a quiet mark is trusted.
const QuietRescanAfter = time.Hour

// Ledger counter fields (top-level JSON fields, incremented in place).
const (
	LedgerActivity = "activity"
	LedgerEnded    = "ended"
	LedgerTokens   = "tokens"
	// LedgerEchoes moves on every write of an open tracker-echo state
	// (coord/echo): the echo sweep's work.
	LedgerEchoes = "echoes"
)

// Sweep names a quiet mark and the counter it is kept against.
type Sweep struct {
	name    string
	counter string
}

var (
	SweepReap       = Sweep{"reap", LedgerActivity}
	SweepRedispatch = Sweep{"redispatch", LedgerActivity}
	SweepGC         = Sweep{"gc", LedgerEnded}
	// SweepPrune keeps its mark against time (MarkQuietUntil), no counter.
	SweepPrune = Sweep{"prune", ""}
	// SweepEcho keeps its mark against the echoes counter and until the
	// earliest time an open state it saw is due (MarkQuietUntil).
	SweepEcho = Sweep{"echo", LedgerEchoes}
	// SweepForge keeps its mark against activity (a delivery that wants a
	// pull request is a non-terminal job's write) and until the earliest
	// retry it saw is due (MarkQuietUntil).
	SweepForge = Sweep{"forge", LedgerActivity}
)

// Ledger is the stored document.
type Ledger struct {
	ID        string `json:"id"`
	ProductID string `json:"productId"`
	Activity  int64  `json:"activity"`
	Ended     int64  `json:"ended"`
	Tokens    int64  `json:"tokens"`
	Echoes    int64  `json:"echoes,omitempty"`
	// ActivityArmed and EndedArmed are the counter values at which a sweep
	// last armed (see armedField); absent until one does.
	ActivityArmed *int64 `json:"activityArmed,omitempty"`
	EndedArmed    *int64 `json:"endedArmed,omitempty"`
	// Quiet holds each sweep's last quiet mark by sweep name.
	Quiet map[string]quietMark `json:"quiet,omitempty"`
	// raw is the document as read ("" for an absent ledger): a mark is
	// written into it (withMark), not over it.
	raw []byte
}

// quietMark: at counter value Seen, verified at At, the sweep had nothing
// to do.
type quietMark struct {
	Seen int64     `json:"seen"`
	At   time.Time `json:"at"`
	// Until, when set, ends the mark: the sweep has work from then on.
	Until time.Time `json:"until,omitzero"`
	// Armed says the sweep armed its counter at Seen before its scan. A
	// mark against an armed counter is trusted only with it: a process of
	// an older version marks without arming.
	Armed bool `json:"armed,omitempty"`
}

// armedCounters are the counters the change feed bumps only when a sweep
// armed them (Bump), each with its armed field in a Ledger; the others
// (tokens, echoes) have every move written.
var armedCounters = map[string]func(*Ledger) **int64{
	LedgerActivity: func(l *Ledger) **int64 { return &l.ActivityArmed },
	LedgerEnded:    func(l *Ledger) **int64 { return &l.EndedArmed },
}

// armedField is the ledger field that arms counter (its JSON name in
// Ledger); "" for a counter not armed.
func armedField(counter string) string {
	if _, ok := armedCounters[counter]; ok {
		return counter + "Armed"
	}
	return ""
}

// armedRef is counter's armed field in l; nil for a counter not armed.
func (l *Ledger) armedRef(counter string) **int64 {
	if ref, ok := armedCounters[counter]; ok {
		return ref(l)
	}
	return nil
}

// armedAt is the value at which counter was last armed; ok is false while
// no sweep ever armed it.
func (l *Ledger) armedAt(counter string) (v int64, ok bool) {
	p := l.armedRef(counter)
	if p == nil || *p == nil {
		return 0, false
	}
	return **p, true
}

func (l *Ledger) counter(field string) int64 {
	switch field {
	case LedgerActivity:
		return l.Activity
	case LedgerEnded:
		return l.Ended
	case LedgerTokens:
		return l.Tokens
	case LedgerEchoes:
		return l.Echoes
	case "": // a sweep kept against time alone
		return 0
	}
	panic("coord: unknown ledger counter " + field)
}

// ReadLedger point-reads the ledger. An absent ledger reads as all zeros
// with rev "" (nothing was ever counted).
func (c *Kernel) ReadLedger(ctx context.Context) (*Ledger, string, error) {
	it, err := c.Store.Read(ctx, store.Ledger, ledgerID, ledgerID)
	if errors.Is(err, store.ErrNotFound) {
		return &Ledger{ID: ledgerID, ProductID: "*"}, "", nil
	}
	if err != nil {
		return nil, "", fmt.Errorf("read ledger: %w", err)
	}
	l, err := Decode[Ledger](it)
	if err != nil {
		return nil, "", err
	}
	l.raw = it.Body
	return l, it.Rev, nil
}

// withMark is the ledger document with sweep's mark set to m and every
// other field as read. A process of another version (a rolling deploy) may
// have written fields this one does not know, a counter or a field of
// another sweep's mark; rewriting the document from this version's struct
// would erase them, and a counter reset under its sweep's mark could match
// that mark again with work pending.
func (l *Ledger) withMark(sweep string, m quietMark) ([]byte, error) {
	return l.edited(func(doc map[string]json.RawMessage) error { return setMark(doc, sweep, m) })
}

// withArmed is the ledger document with field set to v and every other
// field as read (withMark says why).
func (l *Ledger) withArmed(field string, v int64) ([]byte, error) {
	return l.edited(func(doc map[string]json.RawMessage) error {
		var err error
		doc[field], err = json.Marshal(v)
		return err
	})
}

// edited is the document as read with edit applied to its fields.
func (l *Ledger) edited(edit func(doc map[string]json.RawMessage) error) ([]byte, error) {
	raw := l.raw
	if len(raw) == 0 {
		var err error
		if raw, err = json.Marshal(Ledger{ID: l.ID, ProductID: l.ProductID}); err != nil {
			return nil, err
		}
	}
	var doc map[string]json.RawMessage
	if err := json.Unmarshal(raw, &doc); err != nil {
		return nil, fmt.Errorf("ledger document: %w", err)
	}
	if err := edit(doc); err != nil {
		return nil, err
	}
	return json.Marshal(doc)
}

// setMark sets sweep's mark in doc's quiet marks, keeping the others.
func setMark(doc map[string]json.RawMessage, sweep string, m quietMark) error {
	marks := map[string]json.RawMessage{}
	if q, ok := doc["quiet"]; ok {
		if err := json.Unmarshal(q, &marks); err != nil {
			return fmt.Errorf("ledger quiet marks: %w", err)
		}
	}
	var err error
	if marks[sweep], err = json.Marshal(m); err != nil {
		return err
	}
	doc["quiet"], err = json.Marshal(marks)
	return err
}

func LedgerTokensOf(l *Ledger) int64 {
	if l == nil {
		return 0
	}
	return l.Tokens
}

// Bump adds one to a ledger counter, creating the ledger on first use. An
// armed counter (activity, ended) moves only when a sweep armed it at its
// current value, and else nothing is written: no sweep can then be
// trusting, or about to record, a mark at that value (the argument is at
// the top of this file). The condition is checked in the write itself
// (IncrementIfEqual), so it sees every arm committed before.
func (c *Kernel) Bump(ctx context.Context, field string) error {
	if armed := armedField(field); armed != "" {
		_, err := c.Store.IncrementIfEqual(ctx, store.Ledger, ledgerID, ledgerID, field, armed, 1)
		switch {
		case err == nil:
			return nil
		case errors.Is(err, store.ErrPrecondition), errors.Is(err, store.ErrNotFound):
			// Not armed at this value, or no ledger yet (arming creates it).
			c.Counters.BumpsSkipped.Add(1)
			return nil
		}
		return fmt.Errorf("bump ledger %s: %w", field, err)
	}
	for range 2 {
		_, err := c.Store.Increment(ctx, store.Ledger, ledgerID, ledgerID, field, 1)
		if !errors.Is(err, store.ErrNotFound) {
			if err != nil {
				return fmt.Errorf("bump ledger %s: %w", field, err)
			}
			return nil
		}
		// First use: create it at zero (a racing creator is as good) and
		// increment that. A mark recorded at zero meanwhile stays below
		// the counter this bump leaves behind.
		body, _ := json.Marshal(Ledger{ID: ledgerID, ProductID: "*"})
		if _, err := c.Store.Create(ctx, store.Ledger, ledgerID, ledgerID, body); err != nil && !errors.Is(err, store.ErrExists) {
			return fmt.Errorf("create ledger: %w", err)
		}
	}
	return fmt.Errorf("bump ledger %s: %w", field, store.ErrNotFound)
}

// QuietView is what a sweep read of the ledger before scanning.
type QuietView struct {
	sw    Sweep
	armed bool // the sweep armed its counter at seen (arm)
	seen  int64
	// l and rev are that read, so the first attempt to mark needs no
	// second one.
	l   *Ledger
	rev string
}

// Quiet reads the ledger for sw. skip is true when the sweep's last quiet
// mark still holds: it has nothing to do and must not scan. Otherwise the
// returned view is passed to markQuiet if the scan finds nothing.
//
// A ledger that cannot be read (throttled, undecodable) is logged and the
// sweep scans: the ledger only saves scans, and failing the tick instead
// would leave an expired lease unreaped for as long as the ledger fails.
// Such a view marks nothing: no counter was read before the scan.
func (c *Kernel) Quiet(ctx context.Context, sw Sweep) (skip bool, v QuietView) {
	if !c.ChangeFeed {
		return false, QuietView{}
	}
	l, rev, err := c.ReadLedger(ctx)
	if err != nil {
		c.Log.WarnContext(ctx, "the ledger cannot be read: the sweep scans", "sweep", sw.name, "err", err)
		return false, QuietView{}
	}
	v = QuietView{sw: sw, seen: l.counter(sw.counter), l: l, rev: rev}
	if c.trusts(l, sw) {
		c.Counters.QuietSkips.Add(1)
		return true, v
	}
	return false, c.arm(ctx, v)
}

// trusts says whether sw's quiet mark in l still holds.
func (c *Kernel) trusts(l *Ledger, sw Sweep) bool {
	m, ok := l.Quiet[sw.name]
	// A mark from the future (its writer's clock ahead of this one's) is
	// not trusted: it would stretch QuietRescanAfter by the skew.
	age := c.Now().Sub(m.At)
	return ok && m.Seen == l.counter(sw.counter) && age >= 0 && age < QuietRescanAfter &&
		(m.Until.IsZero() || c.Now().Before(m.Until)) &&
		(m.Armed || armedField(sw.counter) == "")
}

// Skips is Quiet for a caller that will scan but never mark (it arms
// nothing): whether sw's last quiet mark still holds.
func (c *Kernel) Skips(ctx context.Context, sw Sweep) bool {
	if !c.ChangeFeed {
		return false
	}
	l, _, err := c.ReadLedger(ctx)
	return err == nil && c.trusts(l, sw)
}

// arm records, before the sweep scans, the counter value it read, when no
// sweep armed it there yet: from then on the change feed bumps the counter
// after the next job write (Bump), so a mark at that value cannot hide
// a job the scan missed. A lost race is retried on a fresh read (the scan
// then counts from that read); a view that could not be armed marks nothing.
func (c *Kernel) arm(ctx context.Context, v QuietView) QuietView {
	field := armedField(v.sw.counter)
	if field == "" {
		return v
	}
	giveUp := func(err error) QuietView {
		c.Log.WarnContext(ctx, "arm the ledger: the sweep scans and marks nothing", "sweep", v.sw.name, "err", err)
		return QuietView{}
	}
	l, rev := v.l, v.rev
	for attempt := range 4 {
		if attempt > 0 {
			var err error
			if l, rev, err = c.ReadLedger(ctx); err != nil {
				return giveUp(err)
			}
		}
		seen := l.counter(v.sw.counter)
		if at, ok := l.armedAt(v.sw.counter); ok && at == seen {
			// Another sweep armed it at this value.
			return QuietView{sw: v.sw, armed: true, seen: seen, l: l, rev: rev}
		}
		body, err := l.withArmed(field, seen)
		if err != nil {
			return giveUp(err)
		}
		newRev, err := c.putLedger(ctx, body, rev)
		switch {
		case err == nil:
			armed := *l
			armed.raw = body
			*armed.armedRef(v.sw.counter) = &seen
			return QuietView{sw: v.sw, armed: true, seen: seen, l: &armed, rev: newRev}
		case lostLedgerRace(err):
			continue
		default:
			return giveUp(err)
		}
	}
	return giveUp(errors.New("the ledger changed under every attempt"))
}

// putLedger writes the ledger document body by CAS on rev, creating it
// when rev is "" (no ledger was read), and returns its new revision.
func (c *Kernel) putLedger(ctx context.Context, body []byte, rev string) (string, error) {
	if rev == "" {
		return c.Store.Create(ctx, store.Ledger, ledgerID, ledgerID, body)
	}
	return c.Store.Replace(ctx, store.Ledger, ledgerID, ledgerID, body, rev)
}

// lostLedgerRace says a putLedger failed because the ledger changed since it
// was read: read it again and retry.
func lostLedgerRace(err error) bool {
	return errors.Is(err, store.ErrPrecondition) || errors.Is(err, store.ErrExists) || errors.Is(err, store.ErrNotFound)
}

// MarkQuiet records that the scan begun after v found nothing, if the
// counter still reads what it read before the scan. A lost race (a bump, or
// another sweep's mark) is retried while the counter is unchanged; once it
// moved, the mark is simply not written and the next tick scans again. A
// failure to write it only costs that scan.
func (c *Kernel) MarkQuiet(ctx context.Context, v QuietView) { c.MarkQuietUntil(ctx, v, time.Time{}) }

// MarkQuietUntil is MarkQuiet for a mark that ends at until (zero: none).
func (c *Kernel) MarkQuietUntil(ctx context.Context, v QuietView, until time.Time) {
	if !c.ChangeFeed || v.l == nil {
		return
	}
	l, rev := v.l, v.rev
	for attempt := range 4 {
		if attempt > 0 {
			var err error
			if l, rev, err = c.ReadLedger(ctx); err != nil {
				return
			}
		}
		if l.counter(v.sw.counter) != v.seen {
			return
		}
		body, err := l.withMark(v.sw.name, quietMark{Seen: v.seen, At: c.Now(), Until: until, Armed: v.armed})
		if err != nil {
			c.Log.WarnContext(ctx, "record quiet sweep", "sweep", v.sw.name, "err", err)
			return
		}
		_, err = c.putLedger(ctx, body, rev)
		switch {
		case err == nil:
			return
		case lostLedgerRace(err):
			continue
		default:
			c.Log.WarnContext(ctx, "record quiet sweep", "sweep", v.sw.name, "err", err)
			return
		}
	}
}
