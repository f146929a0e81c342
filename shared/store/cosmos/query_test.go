package cosmos

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"testing"

	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"
	"github.com/stretchr/testify/require"

	"github.com/gigafactory/fleet/shared/coord"
)

// forbiddenAcrossPartitions are the query features the gateway refuses
// without a partition key (and the Go SDK cannot execute client-side).
var forbiddenAcrossPartitions = regexp.MustCompile(`(?i)\b(ORDER\s+BY|TOP|DISTINCT|GROUP\s+BY|OFFSET|LIMIT|JOIN|VALUE|COUNT|SUM|AVG|MIN|MAX)\b`)

func TestBuildQuery(t *testing.T) {
	tests := []struct {
		name   string
		where  []coord.Cond
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
			where:  []coord.Cond{coord.Eq("stage", "queued")},
			single: "SELECT * FROM c WHERE c.stage = @p0 ORDER BY c.id",
			cross:  "SELECT * FROM c WHERE c.stage = @p0",
			params: []azcosmos.QueryParameter{{Name: "@p0", Value: "queued"}},
		},
		{
			name:   "equality and IN, as in the issue",
			where:  []coord.Cond{coord.Eq("stage", "queued"), coord.In("x", "a", "b")},
			single: "SELECT * FROM c WHERE c.stage = @p0 AND c.x IN (@p1, @p2) ORDER BY c.id",
			cross:  "SELECT * FROM c WHERE c.stage = @p0 AND c.x IN (@p1, @p2)",
			params: []azcosmos.QueryParameter{{Name: "@p0", Value: "queued"}, {Name: "@p1", Value: "a"}, {Name: "@p2", Value: "b"}},
		},
		{
			name:   "IN of one",
			where:  []coord.Cond{coord.In("priority", 3)},
			single: "SELECT * FROM c WHERE c.priority IN (@p0) ORDER BY c.id",
			cross:  "SELECT * FROM c WHERE c.priority IN (@p0)",
			params: []azcosmos.QueryParameter{{Name: "@p0", Value: 3}},
		},
		{
			name:   "numbers and bools",
			where:  []coord.Cond{coord.Eq("n", int64(7)), coord.Eq("f", 1.5), coord.Eq("ok", true)},
			single: "SELECT * FROM c WHERE c.n = @p0 AND c.f = @p1 AND c.ok = @p2 ORDER BY c.id",
			cross:  "SELECT * FROM c WHERE c.n = @p0 AND c.f = @p1 AND c.ok = @p2",
			params: []azcosmos.QueryParameter{{Name: "@p0", Value: int64(7)}, {Name: "@p1", Value: 1.5}, {Name: "@p2", Value: true}},
		},
		{
			name:   "reserved words are bracketed",
			where:  []coord.Cond{coord.Eq("value", 1), coord.Eq("Order", 2), coord.Eq("_ts", 3)},
			single: `SELECT * FROM c WHERE c["value"] = @p0 AND c["Order"] = @p1 AND c._ts = @p2 ORDER BY c.id`,
			cross:  `SELECT * FROM c WHERE c["value"] = @p0 AND c["Order"] = @p1 AND c._ts = @p2`,
			params: []azcosmos.QueryParameter{{Name: "@p0", Value: 1}, {Name: "@p1", Value: 2}, {Name: "@p2", Value: 3}},
		},
		{
			name:   "hostile values stay parameters",
			where:  []coord.Cond{coord.Eq("stage", `x" OR 1=1 --`), coord.In("y", `') ORDER BY c.id`)},
			single: "SELECT * FROM c WHERE c.stage = @p0 AND c.y IN (@p1) ORDER BY c.id",
			cross:  "SELECT * FROM c WHERE c.stage = @p0 AND c.y IN (@p1)",
			params: []azcosmos.QueryParameter{{Name: "@p0", Value: `x" OR 1=1 --`}, {Name: "@p1", Value: `') ORDER BY c.id`}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st, err := BuildQuery(tt.where, true)
			require.NoError(t, err)
			require.Equal(t, Statement{Text: tt.single, Params: tt.params}, st)

			st, err = BuildQuery(tt.where, false)
			require.NoError(t, err)
			require.Equal(t, Statement{Text: tt.cross, Params: tt.params, CrossPartition: true}, st)
		})
	}
}

func TestBuildQueryRefuses(t *testing.T) {
	tests := []struct {
		name    string
		where   []coord.Cond
		wantErr string
	}{
		{"dotted field", []coord.Cond{coord.Eq("a.b", 1)}, "must match"},
		{"bracket injection", []coord.Cond{coord.Eq(`a"] OR c["b`, 1)}, "must match"},
		{"leading digit", []coord.Cond{coord.Eq("1a", 1)}, "must match"},
		{"empty field", []coord.Cond{coord.Eq("", 1)}, "must match"},
		{"spaces", []coord.Cond{coord.Eq("a b", 1)}, "must match"},
		{"unicode", []coord.Cond{coord.Eq("stagé", 1)}, "must match"},
		{"equality without a value", []coord.Cond{{Field: "a", Op: coord.OpEq}}, "takes one value"},
		{"equality with two values", []coord.Cond{{Field: "a", Op: coord.OpEq, Values: []any{1, 2}}}, "takes one value"},
		{"unknown operator", []coord.Cond{{Field: "a", Op: "LIKE", Values: []any{"x"}}}, "unsupported operator"},
		{"object value", []coord.Cond{coord.Eq("a", map[string]int{"x": 1})}, "not a string, number or bool"},
		{"nil value", []coord.Cond{coord.Eq("a", nil)}, "not a string, number or bool"},
		{"NaN", []coord.Cond{coord.In("a", 1.0, nanValue())}, "not a JSON number"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, partitioned := range []bool{true, false} {
				_, err := BuildQuery(tt.where, partitioned)
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
	st, err := BuildQuery([]coord.Cond{coord.Eq("a", 1), coord.In[string]("b")}, false)
	require.NoError(t, err)
	require.True(t, st.MatchesNothing)
	require.Empty(t, st.Text)

	_, err = BuildQuery([]coord.Cond{coord.In[string]("b"), coord.Eq("a.b", 1)}, false)
	require.Error(t, err, "later conditions are still validated")
}

// TestNoCrossPartitionQueryNeedsAQueryPlan enumerates the statement shapes
// BuildQuery can produce — every operator, value count and reserved-word
// field, alone and combined — and checks that no cross-partition one uses a
// feature the gateway refuses across partitions.
func TestNoCrossPartitionQueryNeedsAQueryPlan(t *testing.T) {
	atoms := []coord.Cond{
		coord.Eq("stage", "queued"),
		coord.Eq("value", 1),
		coord.In("repo", "a"),
		coord.In("order", "a", "b", "c"),
		coord.Eq("top", true),
		coord.In("distinct", 1.5, 2),
	}
	var shapes [][]coord.Cond
	for mask := 0; mask < 1<<len(atoms); mask++ {
		var where []coord.Cond
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
			st, err := BuildQuery(where, partitioned)
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

func paramCount(where []coord.Cond) int {
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
		_, err := fx.store.Create(ctx, coord.Jobs, pk, fmt.Sprintf("j%d", i), []byte(body))
		require.NoError(t, err)
	}
	queries := []coord.Query{
		{},
		{PartitionKey: "p0"},
		{Where: []coord.Cond{coord.Eq("stage", "queued")}},
		{PartitionKey: "p1", Where: []coord.Cond{coord.In("n", 1, 3)}, Limit: 1},
		{Where: []coord.Cond{coord.Eq("stage", "queued"), coord.In("n", 0, 2, 4)}, Limit: 10},
	}
	for _, q := range queries {
		_, err := drain(ctx, fx.store, coord.Jobs, q)
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
func drain(ctx context.Context, s *Store, container string, q coord.Query) ([]coord.Item, error) {
	var items []coord.Item
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
		_, err := fx.store.Create(ctx, coord.Jobs, d.pk, d.id, []byte(d.body))
		require.NoError(t, err)
	}
	tests := []struct {
		name    string
		q       coord.Query
		wantIDs []string
		ordered bool
	}{
		{"partition in id order", coord.Query{PartitionKey: "p1"}, []string{"a", "b", "c"}, true},
		{"partition filtered", coord.Query{PartitionKey: "p1", Where: []coord.Cond{coord.Eq("stage", "queued")}}, []string{"a", "c"}, true},
		{"partition paged", coord.Query{PartitionKey: "p1", Limit: 1}, []string{"a", "b", "c"}, true},
		{"cross filtered", coord.Query{Where: []coord.Cond{coord.Eq("stage", "queued")}}, []string{"a", "c", "d"}, false},
		{"cross IN", coord.Query{Where: []coord.Cond{coord.In("stage", "running", "done")}}, []string{"b", "e"}, false},
		{"numbers", coord.Query{Where: []coord.Cond{coord.In("n", 1, 5)}}, []string{"c", "e"}, false},
		{"bools", coord.Query{Where: []coord.Cond{coord.Eq("ok", false)}}, []string{"a"}, false},
		{"cross paged", coord.Query{Limit: 2}, []string{"a", "b", "c", "d", "e"}, false},
		{"empty IN", coord.Query{Where: []coord.Cond{coord.In[string]("stage")}}, nil, false},
		{"no match", coord.Query{PartitionKey: "p3"}, nil, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			items, err := drain(ctx, fx.store, coord.Jobs, tt.q)
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
	_, err := fx.store.Create(ctx, coord.Jobs, "p", "j", []byte(`{"stage":"queued"}`))
	require.NoError(t, err)
	fx.fake.emptyCrossPages = 3
	fx.fake.reset()

	page, err := fx.store.Query(ctx, coord.Jobs, coord.Query{Where: []coord.Cond{coord.Eq("stage", "queued")}})
	require.NoError(t, err)
	require.Len(t, page.Items, 1)
	require.Empty(t, page.Continuation)
	require.Len(t, fx.fake.requests(queryRequests), 4, "three empty pages drained")

	fx.fake.reset()
	page, err = fx.store.Query(ctx, coord.Jobs, coord.Query{Where: []coord.Cond{coord.Eq("stage", "absent")}})
	require.NoError(t, err)
	require.Empty(t, page.Items)
	require.Empty(t, page.Continuation, "an empty page is the end")
	require.Len(t, fx.fake.requests(queryRequests), 4)
	require.EqualValues(t, 0, fx.store.Stats().Query.Errors)
}
