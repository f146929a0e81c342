package cosmos

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/gigafactory/fleet/shared/store"

	"github.com/stretchr/testify/require"
)

// pksPerRange returns n partition keys for each of the fake container's
// ranges.
func pksPerRange(fx *fixture, container string, n int) [][]string {
	fx.fake.mu.Lock()
	defer fx.fake.mu.Unlock()
	c := fx.fake.colls[testDB+"/"+container]
	out := make([][]string, c.ranges)
	for i := 0; ; i++ {
		pk := fmt.Sprintf("p%d", i)
		r := c.rangeOf(pk)
		if len(out[r]) < n {
			out[r] = append(out[r], pk)
		}
		done := true
		for _, ks := range out {
			done = done && len(ks) == n
		}
		if done {
			return out
		}
	}
}

func ids(items []store.Item) []string {
	var out []string
	for _, it := range items {
		out = append(out, it.ID)
	}
	return out
}

func decodeToken(t *testing.T, s string) feedToken {
	t.Helper()
	b, err := base64.RawURLEncoding.DecodeString(s)
	require.NoError(t, err)
	var tok feedToken
	require.NoError(t, json.Unmarshal(b, &tok))
	return tok
}

func TestChangeFeedAcrossRanges(t *testing.T) {
	fx := newFixture(t, nil)
	fx.fake.setRanges(testDB, store.Jobs, 3)
	ctx := context.Background()
	pks := pksPerRange(fx, store.Jobs, 1)

	// Nothing yet: an empty page that still yields a continuation.
	page, err := fx.store.ReadChanges(ctx, store.Jobs, "", 10)
	require.NoError(t, err)
	require.Empty(t, page.Items)
	require.NotEmpty(t, page.Continuation)
	empty := page.Continuation

	for r, ks := range pks {
		_, err := fx.store.Create(ctx, store.Jobs, ks[0], fmt.Sprintf("j%d", r), []byte(`{"v":1}`))
		require.NoError(t, err)
	}
	page, err = fx.store.ReadChanges(ctx, store.Jobs, empty, 10)
	require.NoError(t, err)
	require.ElementsMatch(t, []string{"j0", "j1", "j2"}, ids(page.Items), "every range is read")
	tok := decodeToken(t, page.Continuation)
	require.Equal(t, feedTokenVersion, tok.V)
	require.Equal(t, store.Jobs, tok.Container)
	require.Len(t, tok.Ranges, 3)
	for _, r := range tok.Ranges {
		require.NotEmpty(t, r.Token, "range [%s,%s) has a position", r.Min, r.Max)
	}
	require.Equal(t, "", tok.Ranges[0].Min)
	require.Equal(t, "FF", tok.Ranges[2].Max)
	afterFirst := page.Continuation

	// Nothing new: 304 from every range, an empty page, positions kept.
	fx.fake.reset()
	page, err = fx.store.ReadChanges(ctx, store.Jobs, afterFirst, 10)
	require.NoError(t, err)
	require.Empty(t, page.Items)
	require.Len(t, fx.fake.requests(changeFeedRequests), 3, "one request per range")
	require.Empty(t, fx.fake.requests(func(r recorded) bool { return r.isChangeFeed() && r.Header.Get("If-None-Match") == "" }),
		"every range resumes from its position")

	// Changes in one range only; a document changed twice appears once, in
	// its latest version.
	it, err := fx.store.Read(ctx, store.Jobs, pks[1][0], "j1")
	require.NoError(t, err)
	_, err = fx.store.Replace(ctx, store.Jobs, pks[1][0], "j1", []byte(`{"v":2}`), it.Rev)
	require.NoError(t, err)
	_, err = fx.store.Increment(ctx, store.Jobs, pks[1][0], "j1", "v", 1)
	require.NoError(t, err)
	page, err = fx.store.ReadChanges(ctx, store.Jobs, page.Continuation, 10)
	require.NoError(t, err)
	require.Len(t, page.Items, 1)
	require.Equal(t, "j1", page.Items[0].ID)
	require.JSONEq(t, `{"v":3}`, string(page.Items[0].Body))

	// A persisted continuation resumes every range in another process.
	other := fx.open(nil)
	page, err = other.ReadChanges(ctx, store.Jobs, afterFirst, 10)
	require.NoError(t, err)
	require.Equal(t, []string{"j1"}, ids(page.Items), "only what changed after the persisted position")

	// From the beginning again.
	page, err = other.ReadChanges(ctx, store.Jobs, "", 10)
	require.NoError(t, err)
	require.ElementsMatch(t, []string{"j0", "j1", "j2"}, ids(page.Items))
}

// TestChangeFeedPagesAndFairness: max bounds a page, positions advance
// within a range, and the next read starts at the range after the last one
// read so a busy range cannot starve the others.
func TestChangeFeedPagesAndFairness(t *testing.T) {
	fx := newFixture(t, nil)
	fx.fake.setRanges(testDB, store.Events, 2)
	ctx := context.Background()
	pks := pksPerRange(fx, store.Events, 1)
	for i := range 4 {
		_, err := fx.store.Create(ctx, store.Events, pks[0][0], fmt.Sprintf("a%d", i), []byte(`{}`))
		require.NoError(t, err)
	}
	_, err := fx.store.Create(ctx, store.Events, pks[1][0], "b0", []byte(`{}`))
	require.NoError(t, err)

	var got [][]string
	cont := ""
	for range 6 {
		page, err := fx.store.ReadChanges(ctx, store.Events, cont, 2)
		require.NoError(t, err)
		require.LessOrEqual(t, len(page.Items), 2)
		got = append(got, ids(page.Items))
		cont = page.Continuation
	}
	require.Equal(t, [][]string{
		{"a0", "a1"}, // range 0 fills the page
		{"b0", "a2"}, // range 1 is read first, then range 0 for the rest
		{"a3"},       // range 1 has nothing new (304), range 0 its last change
		nil, nil, nil,
	}, got)
}

func TestChangeFeedRefusesForeignContinuations(t *testing.T) {
	fx := newFixture(t, nil)
	ctx := context.Background()
	page, err := fx.store.ReadChanges(ctx, store.Jobs, "", 1)
	require.NoError(t, err)
	fx.fake.reset()

	tok := func(v feedToken) string {
		s, err := v.encode()
		require.NoError(t, err)
		return s
	}
	good := decodeToken(t, page.Continuation)
	tests := []struct {
		name    string
		cont    string
		wantErr string
	}{
		{"other container", page.Continuation, "belongs to container"},
		{"not base64", "%%%", "not a cosmos change-feed continuation"},
		{"not JSON", base64.RawURLEncoding.EncodeToString([]byte("nope")), "not a cosmos change-feed continuation"},
		{"other version", tok(feedToken{V: 9, Container: store.Runs, Ranges: good.Ranges}), "version 9"},
		{"no ranges", tok(feedToken{V: 1, Container: store.Runs}), "no feed ranges"},
		{"next out of range", tok(feedToken{V: 1, Container: store.Runs, Next: 5, Ranges: good.Ranges}), "out of"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := fx.store.ReadChanges(ctx, store.Runs, tt.cont, 1)
			require.ErrorContains(t, err, tt.wantErr)
		})
	}
	require.Empty(t, fx.fake.requests(nil))
}

func TestChangeFeedErrors(t *testing.T) {
	fx := newFixture(t, nil)
	ctx := context.Background()
	_, err := fx.store.Create(ctx, store.Jobs, "p", "j", []byte(`{}`))
	require.NoError(t, err)
	first, err := fx.store.ReadChanges(ctx, store.Jobs, "", 10)
	require.NoError(t, err)

	fx.fake.on(changeFeedRequests, status(503), status(503))
	page, err := fx.store.ReadChanges(ctx, store.Jobs, "", 10)
	require.NoError(t, err, "503 on a read is retried")
	require.Len(t, page.Items, 1)

	fx.fake.always(changeFeedRequests, status(429, "x-ms-retry-after-ms", "1"))
	_, err = fx.store.ReadChanges(ctx, store.Jobs, first.Continuation, 10)
	require.ErrorIs(t, err, store.ErrThrottled)
	require.Contains(t, err.Error(), "feed range")
}

func TestChangeFeedIgnoresOtherWork(t *testing.T) {
	fx := newFixture(t, nil)
	ctx := context.Background()
	_, err := fx.store.Create(ctx, store.Runs, "job", "r", []byte(`{}`))
	require.NoError(t, err)
	page, err := fx.store.ReadChanges(ctx, store.Jobs, "", 10)
	require.NoError(t, err)
	require.Empty(t, page.Items, "containers have separate feeds")
	require.EqualValues(t, 1, fx.store.Stats().ReadChanges.Calls)
	require.Positive(t, fx.store.Stats().ReadChanges.RequestCharge)
	require.Len(t, fx.fake.requests(func(r recorded) bool { return r.Method == http.MethodGet && r.isChangeFeed() }), 1)
}

// tiling returns n feed ranges covering the key space in order, no token.
func tiling(n int) []feedCursor {
	out := make([]feedCursor, n)
	for i := range n {
		if i > 0 {
			out[i].Min = fmt.Sprintf("%04X", i*0xFF00/n)
		}
		out[i].Max = "FF"
		if i < n-1 {
			out[i].Max = fmt.Sprintf("%04X", (i+1)*0xFF00/n)
		}
	}
	return out
}

// TestChangeFeedRangeCount: a continuation listing more feed ranges than
// the container could have issued it (twice its ranges, for a split another
// process saw first) is refused before any change-feed request, whatever
// it costs to forge; it was one request per listed range.
func TestChangeFeedRangeCount(t *testing.T) {
	t.Parallel()
	fx := newFixture(t, nil)
	fx.fake.setRanges(testDB, store.Jobs, 2)
	ctx := t.Context()
	enc := func(n int) string {
		s, err := feedToken{V: feedTokenVersion, Container: store.Jobs, Ranges: tiling(n)}.encode()
		require.NoError(t, err)
		return s
	}
	for _, tt := range []struct {
		ranges int
		ok     bool
	}{{1, true}, {4, true}, {5, false}, {2000, false}} {
		fx.fake.reset()
		_, err := fx.store.ReadChanges(ctx, store.Jobs, enc(tt.ranges), 10)
		reads := len(fx.fake.requests(changeFeedRequests))
		if tt.ok {
			require.NoError(t, err, "%d ranges", tt.ranges)
			require.LessOrEqual(t, reads, 2*tt.ranges, "%d ranges", tt.ranges)
			continue
		}
		require.ErrorIs(t, err, store.ErrBadContinuation, "%d ranges", tt.ranges)
		require.Zero(t, reads, "%d ranges", tt.ranges)
	}

	// Within one range, the SDK's positions count too.
	one := tiling(1)
	var inner []string
	for range 5 {
		inner = append(inner, `{"minInclusive":"","maxExclusive":"FF","continuationToken":"\"1\""}`)
	}
	one[0].Token = `{"version":1,"resourceId":"","continuation":[` + strings.Join(inner, ",") + `]}`
	s, err := feedToken{V: feedTokenVersion, Container: store.Jobs, Ranges: one}.encode()
	require.NoError(t, err)
	fx.fake.reset()
	_, err = fx.store.ReadChanges(ctx, store.Jobs, s, 10)
	require.ErrorIs(t, err, store.ErrBadContinuation)
	require.Empty(t, fx.fake.requests(changeFeedRequests))
}

// TestChangeFeedRefusedBySDK: what the SDK or the service refuses in a
// continuation the caller supplied is ErrBadContinuation (it was an error
// of no kind, the API's 500); the same answers to a read from the
// beginning, or an outage, are not. The SDK's refusals have no type: this
// pins the messages refusedContinuation looks for.
func TestChangeFeedRefusedBySDK(t *testing.T) {
	t.Parallel()
	fx := newFixture(t, nil)
	ctx := t.Context()
	_, err := fx.store.Create(ctx, store.Runs, "j", "r", []byte(`{"id":"r","jobId":"j"}`))
	require.NoError(t, err)
	events, err := fx.store.ReadChanges(ctx, store.Events, "", 10)
	require.NoError(t, err)
	runs, err := fx.store.ReadChanges(ctx, store.Runs, "", 10)
	require.NoError(t, err)

	// Another container's position (a foreign one, or this one recreated).
	tok := decodeToken(t, events.Continuation)
	tok.Ranges[0].Token = decodeToken(t, runs.Continuation).Ranges[0].Token
	foreign, err := tok.encode()
	require.NoError(t, err)
	_, err = fx.store.ReadChanges(ctx, store.Events, foreign, 10)
	require.ErrorIs(t, err, store.ErrBadContinuation)
	require.ErrorContains(t, err, "issued for a different container")

	// A position the service cannot read.
	fx.fake.on(changeFeedRequests, status(http.StatusBadRequest))
	_, err = fx.store.ReadChanges(ctx, store.Events, events.Continuation, 10)
	require.ErrorIs(t, err, store.ErrBadContinuation)
	require.ErrorContains(t, err, "HTTP 400")

	fx.fake.on(changeFeedRequests, status(http.StatusBadRequest))
	_, err = fx.store.ReadChanges(ctx, store.Events, "", 10)
	require.Error(t, err)
	require.NotErrorIs(t, err, store.ErrBadContinuation, "no continuation was supplied")

	fx.fake.always(changeFeedRequests, status(http.StatusServiceUnavailable))
	_, err = fx.store.ReadChanges(ctx, store.Events, events.Continuation, 10)
	require.ErrorIs(t, err, store.ErrUnavailable)
	require.NotErrorIs(t, err, store.ErrBadContinuation)
}
