package storetest

import (
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/gigafactory/fleet/shared/store"

	"github.com/stretchr/testify/require"
)

// model is what the test wrote: the oracle queries are checked against.
type model struct {
	docs map[string]modelDoc // by key(pk, id)
}

type modelDoc struct {
	pk, id, rev string
	body        []byte
	fields      map[string]any // decoded body: the oracle evaluates conditions on it
}

func newModel() *model { return &model{docs: map[string]modelDoc{}} }

func (m *model) create(t testing.TB, s store.Store, container, pk, id string, body []byte) {
	t.Helper()
	rev := mustCreate(t, s, container, pk, id, body)
	m.docs[key(pk, id)] = modelDoc{pk: pk, id: id, rev: rev, body: body, fields: decode(t, body)}
}

// match lists the keys of documents satisfying where (and pk, when set).
func (m *model) match(pk string, where []store.Cond) []string {
	var out []string
	for k, d := range m.docs {
		if pk != "" && d.pk != pk {
			continue
		}
		ok := true
		for _, c := range where {
			if !condHolds(d.fields, c) {
				ok = false
				break
			}
		}
		if ok {
			out = append(out, k)
		}
	}
	slices.Sort(out)
	return out
}

// condHolds is an independent evaluation of a condition: type-exact, as
// Cosmos DB compares ("1" is not 1, true is not 1, 1 is 1.0).
func condHolds(f map[string]any, c store.Cond) bool {
	v, ok := f[c.Field]
	if !ok {
		return false
	}
	switch c.Op {
	case store.OpLt:
		return jsonLess(v, c.Values[0])
	case store.OpGt:
		return jsonMore(v, c.Values[0])
	}
	for _, want := range c.Values {
		if jsonEqual(v, want) {
			return true
		}
	}
	return false
}

func jsonEqual(stored, want any) bool {
	switch s := stored.(type) {
	case string:
		w, ok := want.(string)
		return ok && w == s
	case bool:
		w, ok := want.(bool)
		return ok && w == s
	case float64:
		switch w := want.(type) {
		case int:
			return float64(w) == s
		case int64:
			return float64(w) == s
		case float64:
			return w == s
		}
	}
	return false // null, objects and arrays never equal a scalar
}

// jsonMore is stored > bound, compared as jsonLess compares.
func jsonMore(stored, bound any) bool {
	switch s := stored.(type) {
	case string:
		b, ok := bound.(string)
		return ok && s > b
	case float64:
		switch b := bound.(type) {
		case int:
			return s > float64(b)
		case int64:
			return s > float64(b)
		case float64:
			return s > b
		}
	}
	return false
}

// jsonLess is stored < bound as Cosmos DB compares: strings by code point,
// numbers numerically, any other pairing never.
func jsonLess(stored, bound any) bool {
	switch s := stored.(type) {
	case string:
		b, ok := bound.(string)
		return ok && s < b
	case float64:
		switch b := bound.(type) {
		case int:
			return s < float64(b)
		case int64:
			return s < float64(b)
		case float64:
			return s < b
		}
	}
	return false
}

// queryAll pages through q and checks each page and item against the model.
// It returns the keys in the order received.
func queryAll(t *testing.T, s store.Store, m *model, container string, q store.Query) []string {
	t.Helper()
	var got []string
	for pages := 0; ; pages++ {
		require.LessOrEqual(t, pages, len(m.docs)+1, "pagination does not end")
		page, err := s.Query(t.Context(), container, q)
		require.NoError(t, err, "query %+v", q)
		if q.Limit > 0 {
			require.LessOrEqual(t, len(page.Items), q.Limit, "page larger than its limit")
		}
		for _, it := range page.Items {
			if q.PartitionKey != "" {
				require.Equal(t, q.PartitionKey, it.PartitionKey)
			}
			d, ok := m.docs[key(it.PartitionKey, it.ID)]
			require.True(t, ok, "query returned unknown document %s/%s", it.PartitionKey, it.ID)
			require.Equal(t, d.rev, it.Rev, "query returned a wrong revision for %s/%s", it.PartitionKey, it.ID)
			require.JSONEq(t, string(d.body), string(it.Body))
			got = append(got, key(it.PartitionKey, it.ID))
		}
		if page.Continuation == "" {
			return got
		}
		q.Continuation = page.Continuation
	}
}

var stages = []string{"queued", "running", "done"}

// queryFixture writes the documents the query tests search: n regular ones
// in partition pk (created in shuffled order, so id order is not creation
// order) and documents whose field v holds values of every JSON type.
func queryFixture(t *testing.T, s store.Store, m *model, container, pk string, n int, seed uint64) {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 7))
	for _, i := range rng.Perm(n) {
		id := fmt.Sprintf("d%03d", i)
		m.create(t, s, container, pk, id, doc(t, container, pk, id, fields{
			"stage":  stages[i%3],
			"prio":   i % 4,
			"urgent": i%2 == 0,
			"score":  float64(i) + 0.5,
			// Times as the coordinator stores them: UTC, fraction trimmed
			// (every third one has none), for store.Before.
			"at": fixtureT0.Add(time.Duration(i) * 1300 * time.Millisecond).Format(time.RFC3339Nano),
		}))
	}
	for id, raw := range map[string]string{
		"t-str":   `"1"`,
		"t-num":   `1`,
		"t-real":  `1.0`,
		"t-big":   `100000000000`,
		"t-bool":  `true`,
		"t-false": `false`,
		"t-null":  `null`,
		"t-arr":   `["1"]`,
		"t-obj":   `{"a":1}`,
	} {
		pkf := pkField(t, container)
		body := []byte(fmt.Sprintf(`{"id":%q,%q:%q,"v":%s}`, id, pkf, pk, raw))
		m.create(t, s, container, pk, id, body)
	}
}

// fixtureT0 is the first fixture document's time.
var fixtureT0 = time.Date(2026, 5, 31, 12, 0, 0, 0, time.UTC)

// queryCases are conditions and the values they are tried with.
var queryCases = []struct {
	name  string
	where []store.Cond
}{
	{"all", nil},
	{"eq string", []store.Cond{store.Eq("stage", "queued")}},
	{"in strings", []store.Cond{store.In("stage", "queued", "done")}},
	{"eq int", []store.Cond{store.Eq("prio", 2)}},
	{"in ints", []store.Cond{store.In("prio", 0, 3)}},
	{"eq float", []store.Cond{store.Eq("score", 4.5)}},
	{"eq true", []store.Cond{store.Eq("urgent", true)}},
	{"eq false", []store.Cond{store.Eq("urgent", false)}},
	{"and", []store.Cond{store.Eq("stage", "queued"), store.Eq("urgent", true)}},
	{"in and eq", []store.Cond{store.In("stage", "running", "done"), store.Eq("prio", 1)}},
	{"no match", []store.Cond{store.Eq("stage", "nope")}},
	{"empty in", []store.Cond{store.In[string]("stage")}},
	{"missing field", []store.Cond{store.Eq("absent", "x")}},
	{"id field", []store.Cond{store.Eq("id", "d005")}},
	{"typed string", []store.Cond{store.Eq("v", "1")}},
	{"typed number", []store.Cond{store.Eq("v", 1)}},
	{"typed big number", []store.Cond{store.Eq("v", int64(100000000000))}},
	{"typed bool", []store.Cond{store.Eq("v", true)}},
	{"typed false", []store.Cond{store.Eq("v", false)}},
	{"typed object text", []store.Cond{store.Eq("v", `{"a":1}`)}},
	{"typed mixed in", []store.Cond{store.In[any]("v", "1", true)}},
	{"lt string", []store.Cond{store.Lt("stage", "queued")}},
	{"lt int", []store.Cond{store.Lt("prio", 2)}},
	{"lt float", []store.Cond{store.Lt("score", 4.5)}},
	{"lt and in", []store.Cond{store.In("stage", "queued", "running"), store.Lt("prio", 2)}},
	{"lt missing field", []store.Cond{store.Lt("absent", "z")}},
	{"typed lt number", []store.Cond{store.Lt("v", 2)}},
	{"typed lt big number", []store.Cond{store.Lt("v", int64(100000000001))}},
	{"typed lt string", []store.Cond{store.Lt("v", "2")}},
	{"before", []store.Cond{store.Before("at", fixtureT0.Add(9100*time.Millisecond))}},
	{"gt string", []store.Cond{store.Gt("stage", "queued")}},
	{"gt int", []store.Cond{store.Gt("prio", 2)}},
	{"gt float and in", []store.Cond{store.In("stage", "queued", "running"), store.Gt("score", 4.5)}},
	{"typed gt number", []store.Cond{store.Gt("v", 0)}},
	{"typed gt string", []store.Cond{store.Gt("v", "0")}},
	{"since", []store.Cond{store.Since("at", fixtureT0.Add(9100*time.Millisecond))}},
	{"window", []store.Cond{store.Since("at", fixtureT0.Add(5*time.Second)), store.Before("at", fixtureT0.Add(20*time.Second))}},
}

func testQuerySinglePartition(t *testing.T, s store.Store) {
	m := newModel()
	queryFixture(t, s, m, store.Jobs, "p1", 23, 1)
	// Same ids and fields in other partitions: none may leak in.
	other := newModel()
	queryFixture(t, s, other, store.Jobs, "p0", 23, 2)
	queryFixture(t, s, other, store.Jobs, "p2", 23, 3)

	for _, tc := range queryCases {
		want := m.match("p1", tc.where)
		for _, limit := range []int{0, 1, 4, 7, 100} {
			t.Run(fmt.Sprintf("%s/limit=%d", tc.name, limit), func(t *testing.T) {
				got := queryAll(t, s, m, store.Jobs, store.Query{PartitionKey: "p1", Where: tc.where, Limit: limit})
				// want is sorted by key, and within one partition that is id
				// order: equality checks order, loss and duplicates at once.
				require.Equal(t, want, got)
				// Descending: the same documents, newest id first.
				got = queryAll(t, s, m, store.Jobs, store.Query{PartitionKey: "p1", Where: tc.where, Limit: limit, Descending: true})
				require.Equal(t, reversed(want), got, "descending")
			})
		}
	}
	// The oracle is not vacuous.
	require.Len(t, m.match("p1", []store.Cond{store.Eq("v", 1)}), 2)
	require.Len(t, m.match("p1", []store.Cond{store.Lt("v", 2)}), 2, "1 and 1.0; not \"1\", true or null")
	testTimeBound(t, m, false)
	testTimeBound(t, m, true)
	require.Len(t, m.match("p1", []store.Cond{store.Eq("stage", "queued")}), 8)
}

// testTimeBound checks store.Before (or, with since, store.Since) against
// the times themselves: every time on the bound's side of it matches;
// none past the slack the bound allows (two seconds after for Before, one
// second before for Since) does.
func testTimeBound(t *testing.T, m *model, since bool) {
	for _, bound := range []time.Duration{-time.Second, 0, 2600 * time.Millisecond, 9100 * time.Millisecond, 13 * time.Second, 40 * time.Second} {
		at := fixtureT0.Add(bound)
		cond := store.Before("at", at)
		if since {
			cond = store.Since("at", at)
		}
		matched := 0
		for _, d := range m.docs {
			raw, ok := d.fields["at"].(string)
			if !ok {
				continue
			}
			v, err := time.Parse(time.RFC3339Nano, raw)
			require.NoError(t, err)
			holds := condHolds(d.fields, cond)
			if holds {
				matched++
			}
			inside, beyond := !v.After(at), !v.Before(at.Truncate(time.Second).Add(2*time.Second))
			if since {
				inside, beyond = !v.Before(at), v.Before(at.Truncate(time.Second).Add(-time.Second))
			}
			switch {
			case inside:
				require.True(t, holds, "%s is on the side of %s (since %v)", raw, at, since)
			case beyond:
				require.False(t, holds, "%s is well beyond %s (since %v)", raw, at, since)
			}
		}
		if (!since && bound >= 0) || (since && bound <= 13*time.Second) {
			require.Positive(t, matched, "bound %s (since %v)", at, since)
		}
	}
}

func testQueryCrossPartition(t *testing.T, s store.Store) {
	m := newModel()
	for i := range 5 {
		queryFixture(t, s, m, store.Jobs, fmt.Sprintf("p%d", i), 9, uint64(i))
	}
	// Matching documents in another container must not appear.
	queryFixture(t, s, newModel(), store.Runs, "p0", 9, 9)

	for _, tc := range queryCases {
		want := m.match("", tc.where)
		for _, limit := range []int{0, 1, 3, 100} {
			t.Run(fmt.Sprintf("%s/limit=%d", tc.name, limit), func(t *testing.T) {
				got := queryAll(t, s, m, store.Jobs, store.Query{Where: tc.where, Limit: limit})
				seen := map[string]bool{}
				for _, k := range got {
					require.False(t, seen[k], "document %q returned twice", k)
					seen[k] = true
				}
				require.ElementsMatch(t, want, got)
			})
		}
	}
	require.Len(t, m.match("", []store.Cond{store.Eq("stage", "queued")}), 15)
}

func reversed(s []string) []string {
	out := slices.Clone(s)
	slices.Reverse(out)
	return out
}

func testQueryRejectsBadInput(t *testing.T, s store.Store) {
	mustCreate(t, s, store.Jobs, "p1", "j1", doc(t, store.Jobs, "p1", "j1", fields{"stage": "queued"}))
	bad := map[string]store.Query{
		"empty field":      {Where: []store.Cond{store.Eq("", "x")}},
		"dotted field":     {Where: []store.Cond{store.Eq("a.b", "x")}},
		"quoted field":     {Where: []store.Cond{store.Eq("stage') OR 1=1 --", "x")}},
		"bracket field":    {Where: []store.Cond{store.Eq("a[0]", "x")}},
		"space field":      {Where: []store.Cond{store.Eq("a b", "x")}},
		"digit first":      {Where: []store.Cond{store.Eq("1a", "x")}},
		"eq two values":    {Where: []store.Cond{{Field: "stage", Op: store.OpEq, Values: []any{"a", "b"}}}},
		"eq no value":      {Where: []store.Cond{{Field: "stage", Op: store.OpEq}}},
		"unknown operator": {Where: []store.Cond{{Field: "stage", Op: "LIKE", Values: []any{"q%"}}}},
		"lt two values":    {Where: []store.Cond{{Field: "prio", Op: store.OpLt, Values: []any{1, 2}}}},
		"lt bool":          {Where: []store.Cond{store.Lt("urgent", true)}},
		"gt bool":          {Where: []store.Cond{store.Gt("urgent", true)}},
		"nil value":        {Where: []store.Cond{store.Eq("stage", nil)}},
		"slice value":      {Where: []store.Cond{store.Eq("stage", []string{"queued"})}},
		"map value":        {Where: []store.Cond{store.Eq("stage", map[string]any{})}},
		"struct value":     {Where: []store.Cond{store.Eq("stage", struct{}{})}},
		"NaN":              {Where: []store.Cond{store.Eq("prio", math.NaN())}},
		"infinity in IN":   {Where: []store.Cond{store.In("prio", 1.0, math.Inf(1))}},
		"raw JSON value":   {Where: []store.Cond{store.Eq("stage", json.RawMessage(`"queued"`))}},
		"negative limit":   {Limit: -1},
	}
	// A cross-partition query has no order to reverse.
	_, err := s.Query(t.Context(), store.Jobs, store.Query{Descending: true})
	requireStoreError(t, err, "a cross-partition query in descending order")
	for name, q := range bad {
		for _, pk := range []string{"p1", ""} {
			q.PartitionKey = pk
			_, err := s.Query(t.Context(), store.Jobs, q)
			requireStoreError(t, err, "query with %s (pk %q)", name, pk)
		}
	}
	// Values are bound, never spliced: a value that looks like SQL matches
	// nothing and breaks nothing.
	for _, v := range []string{`queued' OR '1'='1`, `queued") OR 1=1 --`, `'; DROP TABLE fleet_jobs; --`} {
		for _, pk := range []string{"p1", ""} {
			page, err := s.Query(t.Context(), store.Jobs, store.Query{PartitionKey: pk, Where: []store.Cond{store.Eq("stage", v)}})
			require.NoError(t, err)
			require.Empty(t, page.Items)
		}
	}
	mustRead(t, s, store.Jobs, "p1", "j1")
}

// testQueryBadContinuation: a query continuation the backend did not issue
// is ErrBadContinuation, as a change-feed one is: callers hand cursors back
// (the job listing's), and only this error tells their bad input from a
// fault. One of another query (the other order, across partitions, another
// partition) or a real one truncated is read or refused so, never another
// error.
func testQueryBadContinuation(t *testing.T, s store.Store) {
	ctx := t.Context()
	const c = store.Jobs
	for _, pk := range []string{"p1", "p2"} {
		for i := range 5 {
			id := fmt.Sprintf("j%d", i)
			mustCreate(t, s, c, pk, id, doc(t, c, pk, id, fields{"stage": "queued"}))
		}
	}
	shapes := map[string]store.Query{
		"partition":            {PartitionKey: "p1", Limit: 2},
		"partition descending": {PartitionKey: "p1", Limit: 2, Descending: true},
		"other partition":      {PartitionKey: "p2", Limit: 2, Where: []store.Cond{store.Eq("stage", "queued")}},
		"cross partition":      {Limit: 2},
	}
	issued := map[string]string{}
	for name, q := range shapes {
		page, err := s.Query(ctx, c, q)
		require.NoError(t, err, name)
		require.NotEmpty(t, page.Continuation, "%s: a first page of 2 of 5 has a continuation", name)
		issued[name] = page.Continuation
	}
	for name, q := range shapes {
		for _, cont := range []string{"garbage!", "-1", "x:", "\x00\n", "eyJ2Ijo5fQ", "{\"token\":\"+RID:~abc\",\"range\":{\"min\":\"\",\"max\":\"FF\"}}"} {
			q.Continuation = cont
			_, err := s.Query(ctx, c, q)
			require.ErrorIs(t, err, store.ErrBadContinuation, "%s with %q", name, cont)
		}
		var others []string
		for other, cont := range issued {
			if other != name {
				others = append(others, cont)
			}
		}
		for _, n := range []int{1, len(issued[name]) / 2, len(issued[name]) - 1} {
			others = append(others, issued[name][:n])
		}
		for _, cont := range others {
			q.Continuation = cont
			_, err := s.Query(ctx, c, q)
			if err != nil {
				require.ErrorIs(t, err, store.ErrBadContinuation, "%s with %q", name, cont)
			}
		}
	}
}
