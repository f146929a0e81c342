package cosmos

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/gigafactory/fleet/shared/store"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"
)

// Change feed.
//
// A container's change feed is one stream per feed range (a physical
// partition's slice of the partition-key hash space), each with its own
// position. The store's continuation must therefore carry every range's
// position, or a caller that persists it would resume one range and replay
// or skip the others. It is base64url(JSON(feedToken)):
//
//	{"v":1,"c":"fleet_jobs","n":1,"r":[{"min":"","max":"FF","t":"<sdk token>"}, …]}
//
// "r" comes from ReadFeedRanges on the first read ("" continuation) and is
// fixed afterwards; "t" is the SDK's composite continuation for that range
// (empty until the range was first read, which starts it from the
// beginning), and the SDK follows splits and merges within it; "n" is the
// range to read first next time, so a busy range cannot starve the others.
//
// Mode is latest version: a document changed several times between two
// reads appears once, in its latest version; deletions do not appear (TTL
// expiry neither). Delivery is at least once: a caller that fails before
// persisting a continuation reads the same changes again.

const feedTokenVersion = 1

type feedToken struct {
	V         int          `json:"v"`
	Container string       `json:"c"`
	Next      int          `json:"n"`
	Ranges    []feedCursor `json:"r"`
	// positions counts the ranges' read positions, found by check as it
	// decodes the SDK's tokens (checkRangeCount bounds it).
	positions int
}

type feedCursor struct {
	Min   string `json:"min"`
	Max   string `json:"max"`
	Token string `json:"t,omitempty"`
	// From starts a range not read yet at a time instead of its beginning
	// (ChangesHead): the service's If-Modified-Since. RFC 3339.
	From string `json:"f,omitempty"`
}

func (t feedToken) encode() (string, error) {
	b, err := json.Marshal(t)
	if err != nil {
		return "", fmt.Errorf("encode continuation: %w", err)
	}
	return base64.RawURLEncoding.EncodeToString(b), nil
}

func decodeFeedToken(s, containerName string) (feedToken, error) {
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return feedToken{}, fmt.Errorf("continuation is not a cosmos change-feed continuation (%v): %w", err, store.ErrBadContinuation)
	}
	var t feedToken
	if err := json.Unmarshal(b, &t); err != nil {
		return feedToken{}, fmt.Errorf("continuation is not a cosmos change-feed continuation (%v): %w", err, store.ErrBadContinuation)
	}
	if err := t.check(containerName); err != nil {
		return feedToken{}, fmt.Errorf("%w: %w", err, store.ErrBadContinuation)
	}
	return t, nil
}

func (t *feedToken) check(containerName string) error {
	switch {
	case t.V != feedTokenVersion:
		return fmt.Errorf("continuation version %d, want %d", t.V, feedTokenVersion)
	case t.Container != containerName:
		return fmt.Errorf("continuation belongs to container %q", t.Container)
	case len(t.Ranges) == 0:
		return errors.New("continuation has no feed ranges")
	case t.Next < 0 || t.Next >= len(t.Ranges):
		return fmt.Errorf("continuation next range %d out of %d", t.Next, len(t.Ranges))
	}
	// The ranges were the container's feed ranges when the feed was first
	// read, so they cover the key space once, in order: anything else was
	// not issued here, and each listed range costs a request per read.
	if t.Ranges[0].Min != "" || t.Ranges[len(t.Ranges)-1].Max != epkMax {
		return errors.New("continuation feed ranges do not cover the key space")
	}
	for i, r := range t.Ranges {
		if err := checkRange(r.Min, r.Max); err != nil {
			return fmt.Errorf("continuation feed range %d: %w", i, err)
		}
		if i > 0 && t.Ranges[i-1].Max != r.Min {
			return fmt.Errorf("continuation feed range %d does not follow range %d", i, i-1)
		}
		if r.Token == "" {
			t.positions++
		} else {
			st, err := decodeSDKToken(r)
			if err != nil {
				return fmt.Errorf("continuation feed range %d: %w", i, err)
			}
			t.positions += len(st.Continuation)
		}
		if r.From == "" {
			continue
		}
		if _, err := time.Parse(time.RFC3339Nano, r.From); err != nil {
			return fmt.Errorf("continuation start time %q: %v", r.From, err)
		}
	}
	return nil
}

// epkMax is the exclusive end of the effective-partition-key space as the
// service writes it in feed ranges.
const epkMax = "FF"

// sdkToken is what the store relies on in the SDK's composite change-feed
// continuation (azcosmos' compositeContinuationToken, unexported): the
// positions of the physical ranges within one of the store's feed ranges.
type sdkToken struct {
	ResourceID   string `json:"resourceId"`
	Continuation []struct {
		Min string `json:"minInclusive"`
		Max string `json:"maxExclusive"`
	} `json:"continuation"`
}

// decodeSDKToken checks the SDK token of r: the SDK refuses one that is
// not JSON or lists no range only after a round trip, with an error of no
// kind, and follows any range listed with a request. Its entries must
// overlap r (the SDK narrows a split's children to their parent; after a
// merge an entry may be wider than r).
func decodeSDKToken(r feedCursor) (sdkToken, error) {
	var st sdkToken
	if err := json.Unmarshal([]byte(r.Token), &st); err != nil {
		return sdkToken{}, fmt.Errorf("position is not an SDK continuation: %v", err)
	}
	if len(st.Continuation) == 0 {
		return sdkToken{}, errors.New("position lists no range")
	}
	for j, e := range st.Continuation {
		if err := checkRange(e.Min, e.Max); err != nil {
			return sdkToken{}, fmt.Errorf("position range %d: %w", j, err)
		}
		if compareEPK(e.Max, r.Min) <= 0 || compareEPK(r.Max, e.Min) <= 0 {
			return sdkToken{}, fmt.Errorf("position range %d [%s,%s) is outside its feed range", j, e.Min, e.Max)
		}
	}
	return st, nil
}

// checkRange checks a [min,max) of effective partition keys: upper-case
// hex strings ("" the lowest, "FF" past the highest), min below max.
func checkRange(lo, hi string) error {
	if !isEPK(lo) || !isEPK(hi) || hi == "" {
		return fmt.Errorf("bounds [%q,%q) are not partition key hashes", lo, hi)
	}
	if compareEPK(lo, hi) >= 0 {
		return fmt.Errorf("empty range [%s,%s)", lo, hi)
	}
	return nil
}

func isEPK(s string) bool {
	for _, c := range []byte(s) {
		if (c < '0' || c > '9') && (c < 'A' || c > 'F') {
			return false
		}
	}
	return true
}

// compareEPK orders effective partition keys as the SDK does (its
// internal/epk.CompareEPK): by the common prefix, then a longer key is
// greater unless the rest of it is zeros.
func compareEPK(a, b string) int {
	n := min(len(a), len(b))
	if c := strings.Compare(a[:n], b[:n]); c != 0 {
		return c
	}
	tail := a[n:] + b[n:] // one of them is empty
	if strings.Trim(tail, "0") == "" {
		return 0
	}
	if len(a) > len(b) {
		return 1
	}
	return -1
}

// checkRangeCount refuses a continuation listing more ranges than the
// container could have given it: a forged one with thousands would cost a
// request each per read. The SDK's view of the container's ranges is
// cached without expiry, so a continuation made by another process after a
// split may list more than this one knows: twice as many is allowed (one
// split of every range).
func checkRangeCount(t feedToken, current int) error {
	limit := 2 * current
	if len(t.Ranges) > limit {
		return fmt.Errorf("continuation lists %d feed ranges, the container has %d", len(t.Ranges), current)
	}
	if t.positions > limit {
		return fmt.Errorf("continuation lists %d positions, the container has %d feed ranges", t.positions, current)
	}
	return nil
}

// refusedContinuation reports a change-feed failure caused by the
// continuation the caller supplied: the service's 400 (a position it
// cannot read), and the SDK's refusals of its own token — issued for
// another container (a foreign one, or this one dropped and recreated),
// or ranges that no longer resolve to a partition key range.
func refusedContinuation(err error) bool {
	if isStatus(err, http.StatusBadRequest) || errors.Is(err, azcosmos.ErrFeedRangeUnresolved) {
		return true
	}
	var re *azcore.ResponseError
	if errors.As(err, &re) {
		return false
	}
	// Errors of no kind; pinned by TestChangeFeedRefusedBySDK.
	msg := err.Error()
	for _, s := range []string{
		"the token was issued for a different container",
		"requires a FeedRange to be set in the options, or a continuation token",
		"has nothing to drain",
		"drain queue exceeded safety cap",
	} {
		if strings.Contains(msg, s) {
			return true
		}
	}
	return false
}

// ChangesHead returns a continuation whose ranges start at the current time
// (the service's If-Modified-Since) instead of their beginnings: it costs
// one read of the feed ranges and no documents. A document written within
// the clock skew between this process and the service may be returned too:
// the feed is at least once either way.
func (s *Store) ChangesHead(ctx context.Context, containerName string) (string, error) {
	c, err := s.container(containerName)
	if err != nil {
		return "", s.refuse(opReadChanges, containerName, err)
	}
	now := time.Now().UTC().Format(time.RFC3339Nano)
	var cont string
	err = s.run(ctx, opReadChanges, containerName, true, func(ctx context.Context, cn *conn) error {
		ranges, err := cn.coll(c).ReadFeedRanges(ctx, nil)
		if err != nil {
			return err
		}
		if len(ranges) == 0 {
			return errors.New("container has no feed ranges")
		}
		tok := feedToken{V: feedTokenVersion, Container: containerName}
		for _, r := range ranges {
			tok.Ranges = append(tok.Ranges, feedCursor{Min: r.MinInclusive, Max: r.MaxExclusive, From: now})
		}
		cont, err = tok.encode()
		return err
	})
	return cont, err
}

// ReadChanges returns up to max documents changed after continuation (""
// = from the beginning), visiting feed ranges round robin until max is
// reached or every range was asked once. Pages a range answers empty (304
// Not Modified) still advance its position. An empty page with a
// continuation means nothing new yet; persist the continuation either way.
// A range may return slightly more than asked when documents were written
// in one transaction; they are all returned, since its position has moved
// past them.
func (s *Store) ReadChanges(ctx context.Context, containerName, continuation string, max int) (store.ChangePage, error) {
	w := containerName
	c, err := s.container(containerName)
	if err != nil {
		return store.ChangePage{}, s.refuse(opReadChanges, w, err)
	}
	if max <= 0 {
		max = s.cfg.PageSize
	}
	var start *feedToken
	if continuation != "" {
		t, err := decodeFeedToken(continuation, containerName)
		if err != nil {
			return store.ChangePage{}, s.refuse(opReadChanges, w, err)
		}
		start = &t
	}

	var page store.ChangePage
	err = s.run(ctx, opReadChanges, w, true, func(ctx context.Context, cn *conn) error {
		// Work on a copy: a retried attempt starts again from the caller's
		// continuation.
		var tok feedToken
		if start == nil {
			ranges, err := cn.coll(c).ReadFeedRanges(ctx, nil)
			if err != nil {
				return err
			}
			if len(ranges) == 0 {
				return errors.New("container has no feed ranges")
			}
			tok = feedToken{V: feedTokenVersion, Container: containerName}
			for _, r := range ranges {
				tok.Ranges = append(tok.Ranges, feedCursor{Min: r.MinInclusive, Max: r.MaxExclusive})
			}
		} else {
			ranges, err := cn.coll(c).ReadFeedRanges(ctx, nil)
			if err != nil {
				return err
			}
			if err := checkRangeCount(*start, len(ranges)); err != nil {
				return badContinuation{err}
			}
			tok = *start
			tok.Ranges = append([]feedCursor(nil), start.Ranges...)
		}

		var items []store.Item
		n := len(tok.Ranges)
		next := tok.Next
		for i := 0; i < n && len(items) < max; i++ {
			idx := (tok.Next + i) % n
			cur := &tok.Ranges[idx]
			opts := &azcosmos.ChangeFeedOptions{MaxItemCount: int32(min(max-len(items), 1<<30))}
			if cur.Token == "" {
				// Neither a continuation nor StartFrom: the service starts
				// the range at its beginning.
				opts.FeedRange = &azcosmos.FeedRange{MinInclusive: cur.Min, MaxExclusive: cur.Max}
				if cur.From != "" {
					from, _ := time.Parse(time.RFC3339Nano, cur.From) // checked when decoded
					opts.StartFrom = &from
				}
			} else {
				t := cur.Token
				opts.Continuation = &t
			}
			resp, err := cn.coll(c).ReadChangeFeed(ctx, opts)
			if err != nil {
				if start != nil && refusedContinuation(err) {
					err = badContinuation{err}
				}
				return locate(fmt.Sprintf("feed range [%s,%s)", cur.Min, cur.Max), err)
			}
			if resp.ContinuationToken != "" {
				cur.Token = resp.ContinuationToken
			}
			for _, raw := range resp.Items {
				d, err := decodeDoc(raw, c.pkField)
				if err != nil {
					return fmt.Errorf("changed document: %w", err)
				}
				items = append(items, store.Item{ID: d.id, PartitionKey: d.pk, Rev: d.etag, Body: d.body})
			}
			next = (idx + 1) % n
		}
		tok.Next = next
		cont, err := tok.encode()
		if err != nil {
			return err
		}
		page = store.ChangePage{Items: items, Continuation: cont}
		return nil
	})
	if err != nil {
		return store.ChangePage{}, err
	}
	return page, nil
}
