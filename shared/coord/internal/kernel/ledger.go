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
//   - activity moves once per change-feed batch that held a non-terminal
//     job, after the batch was handled (DispatchChanged). The feed is
//     at-least-once and checkpointed after the handler returns, so every
//     job write is followed by a bump: a crash before it redelivers the
//     batch, which bumps then.
//   - ended moves likewise for batches that held a terminal job (GC's work).
//   - tokens moves on every revocation, rotation and deregistration.
//
// A sweep that scanned and found nothing records the counter value it read
// BEFORE scanning (a quiet mark), with a CAS on the revision of that read.
// Why a later tick may then skip: a job the scan missed was written after
// the read (else the scan would see it), so its bump comes after the read
// too, and the counter no longer equals the mark (the mark's CAS fails if
// the bump came first; the next tick sees a larger counter if it came
// later). Time alone never puts a job into a sweep's stages, so "none
// there at counter n" stays true while the counter is n. Two bounds cover
// what the argument assumes: a bump the host gave up on (it checkpoints
// past a batch that failed all its retries) and a query served by a replica
// behind the ledger's (Cosmos Session consistency across instances):
// a mark older than QuietRescanAfter is not trusted, so such a job waits at
// most that long.
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
	marks := map[string]json.RawMessage{}
	if q, ok := doc["quiet"]; ok {
		if err := json.Unmarshal(q, &marks); err != nil {
			return nil, fmt.Errorf("ledger quiet marks: %w", err)
		}
	}
	var err error
	if marks[sweep], err = json.Marshal(m); err != nil {
		return nil, err
	}
	if doc["quiet"], err = json.Marshal(marks); err != nil {
		return nil, err
	}
	return json.Marshal(doc)
}

func LedgerTokensOf(l *Ledger) int64 {
	if l == nil {
		return 0
	}
	return l.Tokens
}

// Bump adds one to a ledger counter, creating the ledger on first use.
func (c *Kernel) Bump(ctx context.Context, field string) error {
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
	sw   Sweep
	seen int64
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
	m, ok := l.Quiet[sw.name]
	// A mark from the future (its writer's clock ahead of this one's) is
	// not trusted: it would stretch QuietRescanAfter by the skew.
	age := c.Now().Sub(m.At)
	if ok && m.Seen == v.seen && age >= 0 && age < QuietRescanAfter && (m.Until.IsZero() || c.Now().Before(m.Until)) {
		c.Counters.QuietSkips.Add(1)
		return true, v
	}
	return false, v
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
		body, err := l.withMark(v.sw.name, quietMark{Seen: v.seen, At: c.Now(), Until: until})
		if err != nil {
			c.Log.WarnContext(ctx, "record quiet sweep", "sweep", v.sw.name, "err", err)
			return
		}
		if rev == "" {
			_, err = c.Store.Create(ctx, store.Ledger, ledgerID, ledgerID, body)
		} else {
			_, err = c.Store.Replace(ctx, store.Ledger, ledgerID, ledgerID, body, rev)
		}
		switch {
		case err == nil:
			return
		case errors.Is(err, store.ErrPrecondition), errors.Is(err, store.ErrExists), errors.Is(err, store.ErrNotFound):
			continue
		default:
			c.Log.WarnContext(ctx, "record quiet sweep", "sweep", v.sw.name, "err", err)
			return
		}
	}
}
