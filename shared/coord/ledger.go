package coord

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
// a mark older than quietRescanAfter is not trusted, so such a job waits at
// most that long.
//
// Only a coordinator whose job writes are seen by a change feed running
// DispatchChanged may trust the marks (Config.ChangeFeed); without one
// (the Lambda front door) every sweep scans, as before.

// Ledger identity: one document, partition key = id.
const ledgerID = "fleet"

// quietRescanAfter bounds how long a quiet mark is trusted.
const quietRescanAfter = time.Hour

// Ledger counter fields (top-level JSON fields, incremented in place).
const (
	ledgerActivity = "activity"
	ledgerEnded    = "ended"
	ledgerTokens   = "tokens"
)

// sweep names a quiet mark and the counter it is kept against.
type sweep struct {
	name    string
	counter string
}

var (
	sweepReap       = sweep{"reap", ledgerActivity}
	sweepRedispatch = sweep{"redispatch", ledgerActivity}
	sweepGC         = sweep{"gc", ledgerEnded}
)

// ledger is the stored document.
type ledger struct {
	ID        string `json:"id"`
	ProductID string `json:"productId"`
	Activity  int64  `json:"activity"`
	Ended     int64  `json:"ended"`
	Tokens    int64  `json:"tokens"`
	// Quiet holds each sweep's last quiet mark by sweep name.
	Quiet map[string]quietMark `json:"quiet,omitempty"`
}

// quietMark: at counter value Seen, verified at At, the sweep had nothing
// to do.
type quietMark struct {
	Seen int64     `json:"seen"`
	At   time.Time `json:"at"`
}

func (l *ledger) counter(field string) int64 {
	switch field {
	case ledgerActivity:
		return l.Activity
	case ledgerEnded:
		return l.Ended
	case ledgerTokens:
		return l.Tokens
	}
	panic("coord: unknown ledger counter " + field)
}

// readLedger point-reads the ledger. An absent ledger reads as all zeros
// with rev "" (nothing was ever counted).
func (c *Coordinator) readLedger(ctx context.Context) (*ledger, string, error) {
	it, err := c.store.Read(ctx, store.Ledger, ledgerID, ledgerID)
	if errors.Is(err, store.ErrNotFound) {
		return &ledger{ID: ledgerID, ProductID: "*"}, "", nil
	}
	if err != nil {
		return nil, "", fmt.Errorf("read ledger: %w", err)
	}
	l, err := decode[ledger](it)
	if err != nil {
		return nil, "", err
	}
	return l, it.Rev, nil
}

func ledgerTokensOf(l *ledger) int64 {
	if l == nil {
		return 0
	}
	return l.Tokens
}

// bump adds one to a ledger counter, creating the ledger on first use.
func (c *Coordinator) bump(ctx context.Context, field string) error {
	for range 2 {
		_, err := c.store.Increment(ctx, store.Ledger, ledgerID, ledgerID, field, 1)
		if !errors.Is(err, store.ErrNotFound) {
			if err != nil {
				return fmt.Errorf("bump ledger %s: %w", field, err)
			}
			return nil
		}
		// First use: create it at zero (a racing creator is as good) and
		// increment that. A mark recorded at zero meanwhile stays below
		// the counter this bump leaves behind.
		body, _ := json.Marshal(ledger{ID: ledgerID, ProductID: "*"})
		if _, err := c.store.Create(ctx, store.Ledger, ledgerID, ledgerID, body); err != nil && !errors.Is(err, store.ErrExists) {
			return fmt.Errorf("create ledger: %w", err)
		}
	}
	return fmt.Errorf("bump ledger %s: %w", field, store.ErrNotFound)
}

// quietView is what a sweep read of the ledger before scanning.
type quietView struct {
	sw   sweep
	seen int64
	// l and rev are that read, so the first attempt to mark needs no
	// second one.
	l   *ledger
	rev string
}

// quiet reads the ledger for sw. skip is true when the sweep's last quiet
// mark still holds: it has nothing to do and must not scan. Otherwise the
// returned view is passed to markQuiet if the scan finds nothing.
func (c *Coordinator) quiet(ctx context.Context, sw sweep) (skip bool, v quietView, err error) {
	if !c.cfg.ChangeFeed {
		return false, quietView{}, nil
	}
	l, rev, err := c.readLedger(ctx)
	if err != nil {
		return false, quietView{}, err
	}
	v = quietView{sw: sw, seen: l.counter(sw.counter), l: l, rev: rev}
	m, ok := l.Quiet[sw.name]
	if ok && m.Seen == v.seen && c.now().Sub(m.At) < quietRescanAfter {
		c.stats.quietSkips.Add(1)
		return true, v, nil
	}
	return false, v, nil
}

// markQuiet records that the scan begun after v found nothing, if the
// counter still reads what it read before the scan. A lost race (a bump, or
// another sweep's mark) is retried while the counter is unchanged; once it
// moved, the mark is simply not written and the next tick scans again. A
// failure to write it only costs that scan.
func (c *Coordinator) markQuiet(ctx context.Context, v quietView) {
	if !c.cfg.ChangeFeed {
		return
	}
	l, rev := v.l, v.rev
	for attempt := range 4 {
		if attempt > 0 {
			var err error
			if l, rev, err = c.readLedger(ctx); err != nil {
				return
			}
		}
		if l.counter(v.sw.counter) != v.seen {
			return
		}
		if l.Quiet == nil {
			l.Quiet = map[string]quietMark{}
		}
		l.Quiet[v.sw.name] = quietMark{Seen: v.seen, At: c.now()}
		body, err := json.Marshal(l)
		if err != nil {
			return
		}
		if rev == "" {
			_, err = c.store.Create(ctx, store.Ledger, ledgerID, ledgerID, body)
		} else {
			_, err = c.store.Replace(ctx, store.Ledger, ledgerID, ledgerID, body, rev)
		}
		switch {
		case err == nil:
			return
		case errors.Is(err, store.ErrPrecondition), errors.Is(err, store.ErrExists), errors.Is(err, store.ErrNotFound):
			continue
		default:
			c.log.WarnContext(ctx, "record quiet sweep", "sweep", v.sw.name, "err", err)
			return
		}
	}
}
