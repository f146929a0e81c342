package cosmos

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
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
