// Package store is the document-store port: the interface every backend
// (store/sqlite, store/cosmos) implements, its query and change-feed types,
// its errors and the containers the fleet keeps. store/storetest is the
// conformance suite they all pass; the use cases in coord consume it.
package store

import (
	"context"
	"errors"
	"time"
)

// Store errors. Every backend returns exactly these (wrapped is fine), so use
// cases branch on errors.Is whatever the backend.
var (
	// ErrNotFound: no document with that id in that partition. Use cases
	// never return it bare: they report a fleet not_found error wrapping
	// it, so errors.Is matches both it and fleet.ErrNotFound.
	ErrNotFound = errors.New("store: not found")
	// ErrExists: Create found a document with that id (Cosmos 409).
	ErrExists = errors.New("store: already exists")
	// ErrPrecondition: the revision did not match (Cosmos 412): someone else
	// wrote the document since it was read.
	ErrPrecondition = errors.New("store: revision mismatch")
	// ErrThrottled: the backend asked to slow down and its retries ran out.
	ErrThrottled = errors.New("store: throttled")
	// ErrUnavailable: the backend could not be reached.
	ErrUnavailable = errors.New("store: unavailable")
	// ErrTooLarge: the document is over the backend's size limit
	// (fleet.MaxDocumentBytes; Cosmos 413); nothing was written.
	ErrTooLarge = errors.New("store: document too large")
	// ErrBadContinuation: a change-feed or query continuation this backend
	// did not issue (or issued for another container, or another query).
	// Clients hand continuations back (the live event stream's ids, the
	// job listing's cursors), so it is their input, not a fault.
	ErrBadContinuation = errors.New("store: invalid continuation")
)

// Item is a stored JSON document and its revision.
type Item struct {
	ID           string
	PartitionKey string
	// Rev is opaque: Cosmos's _etag, SQLite's write counter. CAS writes pass
	// it back as IfRev.
	Rev  string
	Body []byte
}

// Op is a query condition operator.
type Op string

// Operators. Only plain comparisons: they translate to every backend and to
// Cosmos cross-partition queries, which reject ORDER BY, aggregates, TOP,
// DISTINCT and OFFSET.
const (
	OpEq Op = "="
	OpIn Op = "IN"
	// OpLt is field < value for one string or number: strings compare by
	// code point, numbers numerically, and a field of another type (or
	// absent) never matches. A bound instead of an order: it lets a sweep
	// read only the documents past a deadline, a bounded page at a time,
	// where a cross-partition ORDER BY is not available (BuildQuery in
	// store/cosmos says why).
	OpLt Op = "<"
	// OpGt is field > value, the mirror of OpLt: a window of recent
	// documents (updated after a time) is read without the older ones.
	OpGt Op = ">"
)

// Cond is one condition on a top-level JSON field of the document.
type Cond struct {
	Field  string // a top-level field name such as "stage"
	Op     Op
	Values []any // one value for OpEq; one or more for OpIn (strings, numbers, bools)
}

// Eq builds field = value.
func Eq(field string, value any) Cond { return Cond{Field: field, Op: OpEq, Values: []any{value}} }

// In builds field IN (values...).
func In[T any](field string, values ...T) Cond {
	vs := make([]any, len(values))
	for i, v := range values {
		vs[i] = v
	}
	return Cond{Field: field, Op: OpIn, Values: vs}
}

// Lt builds field < value (a string or a number).
func Lt(field string, value any) Cond { return Cond{Field: field, Op: OpLt, Values: []any{value}} }

// Gt builds field > value (a string or a number).
func Gt(field string, value any) Cond { return Cond{Field: field, Op: OpGt, Values: []any{value}} }

// Since builds a condition matching every document whose time field, as
// the coordinator stores times (see Before), is at or after t; it may also
// match times up to a second before t, so callers re-check on the decoded
// document. It compares text with the start of the second before t's: any
// time of t's second or later sorts after it.
func Since(field string, t time.Time) Cond {
	return Gt(field, t.UTC().Truncate(time.Second).Add(-time.Second).Format(time.RFC3339))
}

// Before builds a condition matching every document whose time field, as
// the coordinator stores times (RFC 3339 in UTC, fractional seconds
// trimmed), is at or before t; it may also match times up to two seconds
// after t, so callers re-check on the decoded document. It compares text
// with the end of t's second: the stored form is fixed width up to the
// seconds, so any time of an earlier second sorts before that bound, and
// a time of the bound's own second sorts before it only with a fraction
// (".", below the bound's "Z").
func Before(field string, t time.Time) Cond {
	return Lt(field, t.UTC().Truncate(time.Second).Add(time.Second).Format(time.RFC3339))
}

// Query selects documents of one container. With PartitionKey set it is a
// single-partition query and results come in id order (descending with
// Descending); without, it is a cross-partition filter whose order is
// unspecified.
type Query struct {
	PartitionKey string
	Where        []Cond // all must hold
	// Descending reverses the id order of a single-partition query: ids
	// that begin with their creation time list the newest first. A
	// cross-partition query has no order to reverse and refuses it.
	Descending bool
	// Limit is the page size; 0 means the backend's default.
	Limit int
	// Continuation resumes after the previous page; "" starts from the top.
	Continuation string
}

// Page is one page of query results. An empty Continuation means the end.
type Page struct {
	Items        []Item
	Continuation string
}

// ChangePage is one page of a container's change feed.
type ChangePage struct {
	// Items are the latest versions of documents changed since the
	// continuation, each once, in the order of their last change.
	Items []Item
	// Continuation resumes after this page; persist it as a checkpoint.
	Continuation string
}

// Store is the document store the use cases run on, shaped after Cosmos DB:
// containers of JSON documents with partition keys, point operations, CAS on
// a revision, plain queries and a change feed. Backends: store/sqlite,
// store/cosmos; store/storetest is the conformance suite they all pass.
type Store interface {
	// Create writes a new document; ErrExists when the id is taken.
	Create(ctx context.Context, container, pk, id string, body []byte) (rev string, err error)
	// Read returns one document; ErrNotFound when absent.
	Read(ctx context.Context, container, pk, id string) (Item, error)
	// Replace overwrites an existing document if its revision is still ifRev;
	// ErrPrecondition when it changed, ErrNotFound when it is gone.
	Replace(ctx context.Context, container, pk, id string, body []byte, ifRev string) (rev string, err error)
	// Upsert writes a document whether or not it exists.
	Upsert(ctx context.Context, container, pk, id string, body []byte) (rev string, err error)
	// Delete removes a document; with ifRev set only at that revision.
	Delete(ctx context.Context, container, pk, id, ifRev string) error
	// Increment adds delta to an integer top-level field of an existing
	// document in one atomic write (Cosmos patch increment) and returns the
	// new value; ErrNotFound when the document is absent.
	Increment(ctx context.Context, container, pk, id, field string, delta int64) (int64, error)
	// IncrementIfEqual is Increment on a condition checked in the same
	// atomic write (a Cosmos patch with a filter predicate): it adds delta
	// to field only while the top-level field guard holds the same integer
	// as field. ErrPrecondition, and nothing written, when it does not (or
	// either is absent); ErrNotFound when the document is absent.
	IncrementIfEqual(ctx context.Context, container, pk, id, field, guard string, delta int64) (int64, error)
	// Query returns one page of documents matching q.
	Query(ctx context.Context, container string, q Query) (Page, error)
	// ReadChanges returns up to max documents changed after continuation
	// ("" = from the beginning). An empty page means nothing new yet.
	ReadChanges(ctx context.Context, container, continuation string, max int) (ChangePage, error)
	// ChangesHead returns a continuation at the current end of container's
	// change feed: ReadChanges from it returns only documents changed after
	// this call. It reads no documents, so a reader that needs only what
	// happens from now on does not replay the container's history.
	ChangesHead(ctx context.Context, container string) (string, error)
}
