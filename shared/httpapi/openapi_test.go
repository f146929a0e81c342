package httpapi

import (
	"encoding/json"
	"maps"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/gigafactory/fleet/shared/coord/explain"

	"github.com/stretchr/testify/require"

	"github.com/gigafactory/fleet/shared/coord"
	"github.com/gigafactory/fleet/shared/coord/admission"
	"github.com/gigafactory/fleet/shared/coord/catalog"
	"github.com/gigafactory/fleet/shared/coord/dag"
	"github.com/gigafactory/fleet/shared/coord/echo"
	"github.com/gigafactory/fleet/shared/fleet"
	"github.com/gigafactory/fleet/shared/protocol"
	"github.com/gigafactory/fleet/shared/schedule"
)

// servedOpenAPI fetches the document as a client would: without a token.
func servedOpenAPI(t *testing.T) map[string]any {
	t.Helper()
	f := newFixture(t)
	res := f.call("GET", "/api/openapi.json", "", nil)
	require.Equal(t, 200, res.status, res)
	require.Equal(t, "application/json", res.header.Get("Content-Type"))
	var doc map[string]any
	require.NoError(t, json.Unmarshal(res.body, &doc))
	return doc
}

var pathParamPattern = regexp.MustCompile(`\{([^}]+)\}`)

// TestOpenAPIRouteCoverage: the served document has one operation for each
// route of the table, and what the table says of each is complete: a
// summary, every path wildcard and query parameter documented with a
// schema, a success response, and access and security as the route's
// access value has them.
func TestOpenAPIRouteCoverage(t *testing.T) {
	t.Parallel()
	doc := servedOpenAPI(t)
	require.Equal(t, "3.1.0", doc["openapi"])

	documented := map[string]map[string]any{}
	for path, item := range doc["paths"].(map[string]any) {
		for method, op := range item.(map[string]any) {
			documented[strings.ToUpper(method)+" "+path] = op.(map[string]any)
		}
	}
	// A route declared twice would be one operation (and a mux panic).
	require.Len(t, documented, len(routes), "operations in the document")

	for _, rt := range routes {
		require.True(t, strings.HasPrefix(rt.pattern, apiPrefix+"/"), rt.pattern)
		key := rt.method + " " + strings.TrimPrefix(rt.pattern, apiPrefix)
		op, ok := documented[key]
		require.True(t, ok, "route %s is not in the document", key)
		require.Equal(t, rt.access.String(), op["x-fleet-access"], key)
		require.NotEmpty(t, op["summary"], key)
		if rt.access == public {
			require.Equal(t, []any{}, op["security"], "%s is public", key)
		} else {
			require.NotContains(t, op, "security", "%s inherits the bearer requirement", key)
		}

		var query, path []string
		for _, p := range asList(op["parameters"]) {
			pm := p.(map[string]any)
			if _, isRef := pm["$ref"]; isRef {
				continue
			}
			require.Contains(t, pm, "schema", "%s parameter %s", key, pm["name"])
			switch pm["in"] {
			case "query":
				query = append(query, pm["name"].(string))
				require.NotEmpty(t, pm["description"], "%s query parameter %s", key, pm["name"])
			case "path":
				path = append(path, pm["name"].(string))
				require.Equal(t, true, pm["required"], "%s path parameter %s", key, pm["name"])
			}
		}
		var wantPath []string
		for _, m := range pathParamPattern.FindAllStringSubmatch(rt.pattern, -1) {
			wantPath = append(wantPath, m[1])
		}
		require.ElementsMatch(t, wantPath, path, "%s path parameters", key)
		// The document lists exactly what the mux accepts.
		require.Equal(t, rt.queryNames(), query, "%s query parameters", key)

		responses := op["responses"].(map[string]any)
		require.True(t, slices.ContainsFunc(slices.Collect(maps.Keys(responses)), func(s string) bool { return s[0] == '2' }),
			"%s documents no success", key)
	}
}

func asList(v any) []any {
	l, _ := v.([]any)
	return l
}

// TestOpenAPIRefsResolve: every $ref points at something defined.
func TestOpenAPIRefsResolve(t *testing.T) {
	t.Parallel()
	doc := servedOpenAPI(t)
	components := doc["components"].(map[string]any)
	var walk func(v any)
	walk = func(v any) {
		switch x := v.(type) {
		case map[string]any:
			if r, ok := x["$ref"].(string); ok {
				parts := strings.Split(strings.TrimPrefix(r, "#/components/"), "/")
				require.Len(t, parts, 2, r)
				kind, _ := components[parts[0]].(map[string]any)
				require.Contains(t, kind, parts[1], "dangling $ref %s", r)
			}
			for _, e := range x {
				walk(e)
			}
		case []any:
			for _, e := range x {
				walk(e)
			}
		}
	}
	walk(doc)
}

// TestOpenAPISchemasMatchTypes: each documented schema has exactly the JSON
// fields of the Go type the server encodes or decodes, so the document
// cannot drift from the wire. The shared/api types are held to their
// schemas by TestOpenAPIMatchesWireTypes (openapi_wire_test.go); these are
// the domain and coordinator types the API answers with.
func TestOpenAPISchemasMatchTypes(t *testing.T) {
	t.Parallel()
	schemas := openAPIDocument()["components"].(obj)["schemas"].(obj)
	for _, tc := range []struct {
		path []string // schema name, then property names to descend
		v    any
	}{
		{[]string{"Job"}, fleet.Job{}},
		{[]string{"Job", "dispatch"}, fleet.Dispatch{}},
		{[]string{"Job", "lastFailure"}, fleet.Failure{}},
		{[]string{"Job", "budget"}, fleet.Budget{}},
		{[]string{"Job", "profile"}, fleet.JobProfile{}},
		{[]string{"Explanation", "profile"}, explain.ProfileExplanation{}},
		{[]string{"Profile"}, fleet.Profile{}},
		{[]string{"Profile", "budget"}, fleet.Budget{}},
		{[]string{"ProfileSummary"}, catalog.ProfileSummary{}},
		{[]string{"Review"}, fleet.Review{}},
		{[]string{"Review", "votes"}, fleet.Vote{}},
		{[]string{"DAG"}, dag.View{}},
		{[]string{"DAG", "nodes"}, dag.Node{}},
		{[]string{"DAG", "edges"}, dag.Edge{}},
		{[]string{"WaitItem"}, explain.WaitItem{}},
		{[]string{"Explanation", "waiting"}, explain.WaitExplanation{}},
		{[]string{"Claimed"}, protocol.Claimed{}},
		{[]string{"Run"}, fleet.Run{}},
		{[]string{"Event"}, fleet.Event{}},
		{[]string{"Artifact"}, fleet.Artifact{}},
		{[]string{"Explanation"}, explain.Explanation{}},
		{[]string{"Explanation", "dispatch"}, fleet.Dispatch{}},
		{[]string{"Explanation", "schedule"}, schedule.Explanation{}},
		{[]string{"Explanation", "schedule", "candidates"}, schedule.Candidate{}},
		{[]string{"Explanation", "schedule", "candidates", "terms"}, schedule.Terms{}},
		{[]string{"Factory"}, fleet.Factory{}},
		{[]string{"Product"}, fleet.Product{}},
		{[]string{"Product", "tracker"}, fleet.TrackerView{}},
		{[]string{"Job", "tracker"}, fleet.TrackerRef{}},
		{[]string{"EchoState"}, echo.View{}},
		{[]string{"RepoInfo"}, catalog.RepoInfo{}},
		{[]string{"QueueState"}, fleet.QueueState{}},
		{[]string{"Metrics"}, coord.Metrics{}},
		{[]string{"Metrics", "factories"}, coord.FactoryMetrics{}},
		{[]string{"Metrics", "starving"}, coord.StarvingJob{}},
		{[]string{"Job", "preemptedBy"}, fleet.JobRef{}},
		{[]string{"Budget"}, admission.BudgetView{}},
		{[]string{"Burndown"}, admission.Burndown{}},
		{[]string{"Burndown", "points"}, fleet.BurnPoint{}},
		{[]string{"Run", "usage"}, fleet.Usage{}},
		{[]string{"Run", "diff"}, fleet.DiffStat{}},
		{[]string{"Job", "runReport"}, fleet.RunReport{}},
		{[]string{"Explanation", "budget"}, fleet.Hold{}},
		{[]string{"Explanation", "seatCap"}, fleet.Hold{}},
		{[]string{"Product", "forge"}, fleet.ForgeConfig{}},
		{[]string{"Job", "pullRequest"}, fleet.PullRequest{}},
		{[]string{"Job", "feedback"}, fleet.Feedback{}},
		{[]string{"Job", "prSync"}, fleet.PRSync{}},
	} {
		name := strings.Join(tc.path, ".")
		s, ok := schemas[tc.path[0]].(obj)
		require.True(t, ok, "no schema %s", tc.path[0])
		for _, p := range tc.path[1:] {
			s = s["properties"].(obj)[p].(obj)
			if items, ok := s["items"].(obj); ok {
				s = items
			}
		}
		props, ok := s["properties"].(obj)
		require.True(t, ok, "%s has no properties", name)
		require.ElementsMatch(t, jsonFields(reflect.TypeOf(tc.v)), slices.Collect(maps.Keys(props)), name)
		if strings.HasSuffix(tc.path[0], "Request") {
			require.Equal(t, false, s["additionalProperties"], "%s: the server refuses unknown fields", name)
		}
	}
}

// TestOpenAPISharedSchemasKeepTheirOwnDescription: usage and diff schemas
// are shared by runs, usage reports and PATCH; the PATCH property's
// description once wrote itself into the shared map, so the run schema
// carried it too (and building two documents at once raced).
func TestOpenAPISharedSchemasKeepTheirOwnDescription(t *testing.T) {
	t.Parallel()
	schemas := openAPIDocument()["components"].(obj)["schemas"].(obj)
	prop := func(schema, name string) obj {
		return schemas[schema].(obj)["properties"].(obj)[name].(obj)
	}
	require.NotEmpty(t, prop("PatchRequest", "usage")["description"])
	require.NotContains(t, prop("Run", "usage"), "description")
	require.NotContains(t, prop("Run", "diff"), "description")
}
