package cosmos

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"testing"

	"github.com/gigafactory/fleet/shared/store"

	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"
	"github.com/stretchr/testify/require"
)

// forbiddenAcrossPartitions are the query features the gateway refuses
// without a partition key (and the Go SDK cannot execute client-side).
var forbiddenAcrossPartitions = regexp.MustCompile(`(?i)\b(ORDER\s+BY|TOP|DISTINCT|GROUP\s+BY|OFFSET|LIMIT|JOIN|VALUE|COUNT|SUM|AVG|MIN|MAX)\b`)

func TestBuildQuery(t *testing.T) {
	tests := []struct {
		name   string
		where  []store.Cond
		single string // text with a partition key
		cross  string // text without
		params []azcosmos.QueryParameter
	}{
		{
			name:   "no condition",
			single: "SELECT * FROM c ORDER BY c.id",
			cross:  "SELECT * FROM c",
		},
		{
			name:   "equality",
			where:  []store.Cond{store.Eq("stage", "queued")},
			single: "SELECT * FROM c WHERE c.stage = @p0 ORDER BY c.id",
			cross:  "SELECT * FROM c WHERE c.stage = @p0",
			params: []azcosmos.QueryParameter{{Name: "@p0", Value: "queued"}},
		},
		{
			name:   "equality and IN, as in the issue",
			where:  []store.Cond{store.Eq("stage", "queued"), store.In("x", "a", "b")},
			single: "SELECT * FROM c WHERE c.stage = @p0 AND c.x IN (@p1, @p2) ORDER BY c.id",
			cross:  "SELECT * FROM c WHERE c.stage = @p0 AND c.x IN (@p1, @p2)",
			params: []azcosmos.QueryParameter{{Name: "@p0", Value: "queued"}, {Name: "@p1", Value: "a"}, {Name: "@p2", Value: "b"}},
		},
		{
			name:   "IN of one",
			where:  []store.Cond{store.In("priority", 3)},
			single: "SELECT * FROM c WHERE c.priority IN (@p0) ORDER BY c.id",
			cross:  "SELECT * FROM c WHERE c.priority IN (@p0)",
			params: []azcosmos.QueryParameter{{Name: "@p0", Value: 3}},
		},
		{
			name:   "numbers and bools",
			where:  []store.Cond{store.Eq("n", int64(7)), store.Eq("f", 1.5), store.Eq("ok", true)},
			single: "SELECT * FROM c WHERE c.n = @p0 AND c.f = @p1 AND c.ok = @p2 ORDER BY c.id",
			cross:  "SELECT * FROM c WHERE c.n = @p0 AND c.f = @p1 AND c.ok = @p2",
			params: []azcosmos.QueryParameter{{Name: "@p0", Value: int64(7)}, {Name: "@p1", Value: 1.5}, {Name: "@p2", Value: true}},
		},
		{
			name:   "less than, beside equality",
			where:  []store.Cond{store.In("stage", "assigned", "building"), store.Lt("leaseExpiresAt", "2026-05-31T12:00:00Z"), store.Lt("n", 3)},
			single: "SELECT * FROM c WHERE c.stage IN (@p0, @p1) AND c.leaseExpiresAt < @p2 AND c.n < @p3 ORDER BY c.id",
			cross:  "SELECT * FROM c WHERE c.stage IN (@p0, @p1) AND c.leaseExpiresAt < @p2 AND c.n < @p3",
			params: []azcosmos.QueryParameter{{Name: "@p0", Value: "assigned"}, {Name: "@p1", Value: "building"}, {Name: "@p2", Value: "2026-05-31T12:00:00Z"}, {Name: "@p3", Value: 3}},
		},
		{
			name:   "reserved words are bracketed",
			where:  []store.Cond{store.Eq("value", 1), store.Eq("Order", 2), store.Eq("_ts", 3)},
			single: `SELECT * FROM c WHERE c["value"] = @p0 AND c["Order"] = @p1 AND c._ts = @p2 ORDER BY c.id`,
			cross:  `SELECT * FROM c WHERE c["value"] = @p0 AND c["Order"] = @p1 AND c._ts = @p2`,
			params: []azcosmos.QueryParameter{{Name: "@p0", Value: 1}, {Name: "@p1", Value: 2}, {Name: "@p2", Value: 3}},
		},
		{
			name:   "hostile values stay parameters",
			where:  []store.Cond{store.Eq("stage", `x" OR 1=1 --`), store.In("y", `') ORDER BY c.id`)},
			single: "SELECT * FROM c WHERE c.stage = @p0 AND c.y IN (@p1) ORDER BY c.id",
			cross:  "SELECT * FROM c WHERE c.stage = @p0 AND c.y IN (@p1)",
			params: []azcosmos.QueryParameter{{Name: "@p0", Value: `x" OR 1=1 --`}, {Name: "@p1", Value: `') ORDER BY c.id`}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st, err := BuildQuery(tt.where, true, false)
			require.NoError(t, err)
			require.Equal(t, Statement{Text: tt.single, Params: tt.params}, st)

			st, err = BuildQuery(tt.where, false, false)
			require.NoError(t, err)
			require.Equal(t, Statement{Text: tt.cross, Params: tt.params, CrossPartition: true}, st)
		})
	}
}

// TestBuildQueryDescending: a single-partition query reverses its id
// order; a cross-partition one has none to reverse and is refused.
func TestBuildQueryDescending(t *testing.T) {
	st, err := BuildQuery([]store.Cond{store.Eq("stage", "queued")}, true, true)
	require.NoError(t, err)
	require.Equal(t, "SELECT * FROM c WHERE c.stage = @p0 ORDER BY c.id DESC", st.Text)
	_, err = BuildQuery(nil, false, true)
	require.ErrorContains(t, err, "no order to reverse")
}

func TestBuildQueryRefuses(t *testing.T) {
	tests := []struct {
		name    string
		where   []store.Cond
		wantErr string
	}{
		{"dotted field", []store.Cond{store.Eq("a.b", 1)}, "must match"},
		{"bracket injection", []store.Cond{store.Eq(`a"] OR c["b`, 1)}, "must match"},
		{"leading digit", []store.Cond{store.Eq("1a", 1)}, "must match"},
		{"empty field", []store.Cond{store.Eq("", 1)}, "must match"},
		{"spaces", []store.Cond{store.Eq("a b", 1)}, "must match"},
		{"unicode", []store.Cond{store.Eq("stagé", 1)}, "must match"},
		{"equality without a value", []store.Cond{{Field: "a", Op: store.OpEq}}, "takes one value"},
		{"equality with two values", []store.Cond{{Field: "a", Op: store.OpEq, Values: []any{1, 2}}}, "takes one value"},
		{"less than with two values", []store.Cond{{Field: "a", Op: store.OpLt, Values: []any{1, 2}}}, "takes one value"},
		{"less than a bool", []store.Cond{store.Lt("a", true)}, "string or a number"},
		{"unknown operator", []store.Cond{{Field: "a", Op: "LIKE", Values: []any{"x"}}}, "unsupported operator"},
		{"object value", []store.Cond{store.Eq("a", map[string]int{"x": 1})}, "not a string, number or bool"},
		{"nil value", []store.Cond{store.Eq("a", nil)}, "not a string, number or bool"},
		{"NaN", []store.Cond{store.In("a", 1.0, nanValue())}, "not a JSON number"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, partitioned := range []bool{true, false} {
				_, err := BuildQuery(tt.where, partitioned, false)
				require.ErrorContains(t, err, tt.wantErr)
			}
		})
	}
}

func nanValue() float64 {
	var zero float64
	return zero / zero
}

func TestBuildQueryEmptyIN(t *testing.T) {
	st, err := BuildQuery([]store.Cond{store.Eq("a", 1), store.In[string]("b")}, false, false)
	require.NoError(t, err)
	require.True(t, st.MatchesNothing)
	require.Empty(t, st.Text)

	_, err = BuildQuery([]store.Cond{store.In[string]("b"), store.Eq("a.b", 1)}, false, false)
	require.Error(t, err, "later conditions are still validated")
}

// TestNoCrossPartitionQueryNeedsAQueryPlan enumerates the statement shapes
// BuildQuery can produce — every operator, value count and reserved-word
// field, alone and combined — and checks that no cross-partition one uses a
// feature the gateway refuses across partitions.
func TestNoCrossPartitionQueryNeedsAQueryPlan(t *testing.T) {
	atoms := []store.Cond{
		store.Eq("stage", "queued"),
		store.Eq("value", 1),
		store.In("repo", "a"),
		store.In("order", "a", "b", "c"),
		store.Eq("top", true),
		store.In("distinct", 1.5, 2),
		store.Lt("select", "2026-05-31T12:00:00Z"),
	}
	var shapes [][]store.Cond
	for mask := 0; mask < 1<<len(atoms); mask++ {
		var where []store.Cond
		for i, a := range atoms {
			if mask&(1<<i) != 0 {
				where = append(where, a)
			}
		}
		shapes = append(shapes, where)
	}
	seen := map[string]bool{}
	for _, where := range shapes {
		for _, partitioned := range []bool{true, false} {
			st, err := BuildQuery(where, partitioned, false)
			require.NoError(t, err)
			seen[st.Text] = true
			require.Equal(t, !partitioned, st.CrossPartition)
			if st.CrossPartition {
				// Reserved words appear only inside c["..."]; strip those.
				text := regexp.MustCompile(`c\["[A-Za-z_][A-Za-z0-9_]*"\]`).ReplaceAllString(st.Text, "c[field]")
				require.NotRegexp(t, forbiddenAcrossPartitions, text, st.Text)
			} else {
				require.Regexp(t, `ORDER BY c\.id$`, st.Text)
			}
			require.Len(t, st.Params, paramCount(where), "every value travels as a parameter")
		}
	}
	require.Len(t, seen, 2<<len(atoms), "every shape distinct")
}

func paramCount(where []store.Cond) int {
	n := 0
	for _, c := range where {
		n += len(c.Values)
	}
	return n
}

// TestQueriesOnTheWire checks every query the store sent in a run of
// queries: cross-partition ones (no partition key header) are plain filters
// with cross-partition enabled; single-partition ones carry the key and do
// not enable fan-out.
func TestQueriesOnTheWire(t *testing.T) {
	fx := newFixture(t, func(c *Config) { c.PageSize = 2 })
	ctx := context.Background()
	for i := range 5 {
		pk := fmt.Sprintf("p%d", i%2)
		body := fmt.Sprintf(`{"stage":%q,"n":%d}`, []string{"queued", "running"}[i%2], i)
		_, err := fx.store.Create(ctx, store.Jobs, pk, fmt.Sprintf("j%d", i), []byte(body))
		require.NoError(t, err)
	}
	queries := []store.Query{
		{},
		{PartitionKey: "p0"},
		{Where: []store.Cond{store.Eq("stage", "queued")}},
		{PartitionKey: "p1", Where: []store.Cond{store.In("n", 1, 3)}, Limit: 1},
		{Where: []store.Cond{store.Eq("stage", "queued"), store.In("n", 0, 2, 4)}, Limit: 10},
	}
	for _, q := range queries {
		_, err := drain(ctx, fx.store, store.Jobs, q)
		require.NoError(t, err)
	}
	sent := fx.fake.requests(queryRequests)
	require.NotEmpty(t, sent)
	for _, r := range sent {
		var body struct {
			Query string `json:"query"`
		}
		require.NoError(t, json.Unmarshal(r.Body, &body))
		if r.Header.Get("x-ms-documentdb-partitionkey") == "" {
			require.NotRegexp(t, forbiddenAcrossPartitions, body.Query)
			require.Equal(t, "true", r.Header.Get("x-ms-documentdb-query-enablecrosspartition"))
		} else {
			// Without the header the service refuses to fan the query out.
			require.Empty(t, r.Header.Get("x-ms-documentdb-query-enablecrosspartition"), "a single-partition query must not fan out")
		}
	}
}

// drain reads every page of q.
func drain(ctx context.Context, s *Store, container string, q store.Query) ([]store.Item, error) {
	var items []store.Item
	for {
		page, err := s.Query(ctx, container, q)
		if err != nil {
			return nil, err
		}
		items = append(items, page.Items...)
		if page.Continuation == "" {
			return items, nil
		}
		q.Continuation = page.Continuation
	}
}

func TestQueryResults(t *testing.T) {
	fx := newFixture(t, nil)
	ctx := context.Background()
	docs := []struct{ pk, id, body string }{
		{"p1", "c", `{"stage":"queued","n":1,"ok":true}`},
		{"p1", "a", `{"stage":"queued","n":2,"ok":false}`},
		{"p1", "b", `{"stage":"running","n":3}`},
		{"p2", "d", `{"stage":"queued","n":4}`},
		{"p2", "e", `{"stage":"done","n":5}`},
	}
	for _, d := range docs {
		_, err := fx.store.Create(ctx, store.Jobs, d.pk, d.id, []byte(d.body))
		require.NoError(t, err)
	}
	tests := []struct {
		name    string
		q       store.Query
		wantIDs []string
		ordered bool
	}{
		{"partition in id order", store.Query{PartitionKey: "p1"}, []string{"a", "b", "c"}, true},
		{"partition filtered", store.Query{PartitionKey: "p1", Where: []store.Cond{store.Eq("stage", "queued")}}, []string{"a", "c"}, true},
		{"partition paged", store.Query{PartitionKey: "p1", Limit: 1}, []string{"a", "b", "c"}, true},
		{"cross filtered", store.Query{Where: []store.Cond{store.Eq("stage", "queued")}}, []string{"a", "c", "d"}, false},
		{"cross IN", store.Query{Where: []store.Cond{store.In("stage", "running", "done")}}, []string{"b", "e"}, false},
		{"numbers", store.Query{Where: []store.Cond{store.In("n", 1, 5)}}, []string{"c", "e"}, false},
		{"bools", store.Query{Where: []store.Cond{store.Eq("ok", false)}}, []string{"a"}, false},
		{"cross paged", store.Query{Limit: 2}, []string{"a", "b", "c", "d", "e"}, false},
		{"empty IN", store.Query{Where: []store.Cond{store.In[string]("stage")}}, nil, false},
		{"no match", store.Query{PartitionKey: "p3"}, nil, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			items, err := drain(ctx, fx.store, store.Jobs, tt.q)
			require.NoError(t, err)
			var ids []string
			for _, it := range items {
				ids = append(ids, it.ID)
				require.NotEmpty(t, it.Rev)
			}
			if tt.ordered {
				require.Equal(t, tt.wantIDs, ids)
			} else {
				require.ElementsMatch(t, tt.wantIDs, ids)
			}
		})
	}
}

// TestQueryDrainsEmptyPages: the gateway may answer a cross-partition page
// with no documents but a continuation; the store keeps reading, so an empty
// page means the end.
func TestQueryDrainsEmptyPages(t *testing.T) {
	fx := newFixture(t, nil)
	ctx := context.Background()
	_, err := fx.store.Create(ctx, store.Jobs, "p", "j", []byte(`{"stage":"queued"}`))
	require.NoError(t, err)
	fx.fake.emptyCrossPages = 3
	fx.fake.reset()

	page, err := fx.store.Query(ctx, store.Jobs, store.Query{Where: []store.Cond{store.Eq("stage", "queued")}})
	require.NoError(t, err)
	require.Len(t, page.Items, 1)
	require.Empty(t, page.Continuation)
	require.Len(t, fx.fake.requests(queryRequests), 4, "three empty pages drained")

	fx.fake.reset()
	page, err = fx.store.Query(ctx, store.Jobs, store.Query{Where: []store.Cond{store.Eq("stage", "absent")}})
	require.NoError(t, err)
	require.Empty(t, page.Items)
	require.Empty(t, page.Continuation, "an empty page is the end")
	require.Len(t, fx.fake.requests(queryRequests), 4)
	require.EqualValues(t, 0, fx.store.Stats().Query.Errors)
}

// TestQueryBadContinuation: the service's 400 to the caller's continuation
// is ErrBadContinuation, and one no service issues (a control character,
// which the HTTP client refuses to send) is refused before any request;
// a 400 without a continuation stays a failure of no kind.
func TestQueryBadContinuation(t *testing.T) {
	t.Parallel()
	fx := newFixture(t, nil)
	ctx := t.Context()
	q := store.Query{PartitionKey: "p1", Continuation: "forged"}
	_, err := fx.store.Query(ctx, store.Jobs, q)
	require.ErrorIs(t, err, store.ErrBadContinuation)
	require.ErrorContains(t, err, "HTTP 400")

	fx.fake.reset()
	q.Continuation = "off:1\r\nX-Injected: 1"
	_, err = fx.store.Query(ctx, store.Jobs, q)
	require.ErrorIs(t, err, store.ErrBadContinuation)
	require.Empty(t, fx.fake.requests(queryRequests))

	fx.fake.on(queryRequests, status(http.StatusBadRequest))
	_, err = fx.store.Query(ctx, store.Jobs, store.Query{PartitionKey: "p1"})
	require.Error(t, err)
	require.NotErrorIs(t, err, store.ErrBadContinuation, "no continuation was supplied")
}
