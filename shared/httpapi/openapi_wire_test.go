package httpapi

import (
	"go/ast"
	"go/parser"
	"go/token"
	"maps"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gigafactory/fleet/shared/api"
	"github.com/gigafactory/fleet/shared/fleet"
)

// locate finds one schema in the OpenAPI document.
type locate struct {
	where string
	find  func(doc obj) obj
}

// component is the schema components.schemas[name], descending into
// props (and through array items) when given.
func component(name string, props ...string) locate {
	return locate{where: strings.Join(append([]string{name}, props...), "."), find: func(doc obj) obj {
		s, _ := doc["components"].(obj)["schemas"].(obj)[name].(obj)
		return descend(s, props)
	}}
}

// answer is the JSON schema of an operation's answer with status.
func answer(method, path, status string, props ...string) locate {
	return locate{where: method + " " + path + " " + status, find: func(doc obj) obj {
		op := operationOf(doc, method, path)
		if op == nil {
			return nil
		}
		r, _ := op["responses"].(obj)[status].(obj)
		return descend(jsonSchema(r), props)
	}}
}

// body is the JSON schema of an operation's request body.
func body(method, path string) locate {
	return locate{where: method + " " + path + " body", find: func(doc obj) obj {
		op := operationOf(doc, method, path)
		if op == nil {
			return nil
		}
		b, _ := op["requestBody"].(obj)
		return jsonSchema(b)
	}}
}

func operationOf(doc obj, method, path string) obj {
	item, _ := doc["paths"].(obj)[path].(obj)
	op, _ := item[strings.ToLower(method)].(obj)
	return op
}

func jsonSchema(holder obj) obj {
	content, _ := holder["content"].(obj)
	media, _ := content["application/json"].(obj)
	s, _ := media["schema"].(obj)
	return s
}

func descend(s obj, props []string) obj {
	for _, p := range props {
		if s == nil {
			return nil
		}
		s, _ = s["properties"].(obj)[p].(obj)
		if items, ok := s["items"].(obj); ok {
			s = items
		}
	}
	return s
}

// resolve follows a $ref to its component.
func resolve(doc, s obj) obj {
	if r, ok := s["$ref"].(string); ok {
		name := strings.TrimPrefix(r, "#/components/schemas/")
		s, _ = doc["components"].(obj)["schemas"].(obj)[name].(obj)
	}
	if items, ok := s["items"].(obj); ok && s["type"] == "array" {
		return resolve(doc, items)
	}
	return s
}

// apiWire ties every body type of shared/api to the schema documenting it.
// The server decodes requests into and encodes answers from these types,
// and every client decodes into them, so this is where the document and
// the wire meet.
var apiWire = []struct {
	at locate
	v  any
	// extra are schema properties the type does not spell out, and why.
	extra []string
	// open says the request takes fields beyond the schema's.
	open bool
}{
	{at: component("Error"), v: api.ErrorBody{}},
	{at: component("Error", "error"), v: api.ErrorDetail{}},
	{at: component("Health"), v: api.Health{}},
	{at: component("JobPage"), v: api.JobPage{}},
	{at: answer("GET", "/fleet/jobs/{id}/runs", "200"), v: api.List[fleet.Run]{}},
	{at: component("SubmitRequest"), v: api.SubmitRequest{}},
	{at: component("Submitted"), v: api.Submitted{}},
	{at: component("PatchRequest"), v: api.PatchRequest{}},
	{at: component("ActionRequest"), v: api.ActionRequest{}},
	{at: component("ChildrenRequest"), v: api.ChildrenRequest{}},
	{at: component("ReviewRequest"), v: api.ReviewRequest{}},
	{at: component("VoteRequest"), v: api.VoteRequest{}},
	{at: component("UsageRequest"), v: api.UsageRequest{}},
	{at: component("DAG"), v: api.DAG{}},
	{at: component("DAG", "nodes"), v: api.DAGNode{}},
	{at: component("DAG", "edges"), v: api.DAGEdge{}},
	{at: answer("GET", "/fleet/events", "200"), v: api.ProductChanges{}},
	{at: answer("GET", "/fleet/events", "200", "items"), v: api.ProductChange{}},
	{at: body("POST", "/fleet/claim"), v: api.ClaimRequest{}},
	{at: component("Claimed"), v: api.Claimed{}},
	{at: component("AcceptRequest"), v: api.AcceptRequest{}},
	{at: component("FailRequest"), v: api.FailRequest{}},
	{at: component("LeaseRequest"), v: api.LeaseRequest{}},
	{at: component("RenewResponse"), v: api.Renewal{}},
	{at: component("ForgeDelivery"), v: api.ForgeDelivery{}},
	{at: component("LogAppended"), v: api.LogAppended{}},
	{at: component("ReleaseRequest"), v: api.ReleaseRequest{}},
	{at: component("EnrollRequest"), v: api.EnrollRequest{}},
	{at: component("EnrollResponse"), v: api.EnrollResponse{}},
	{at: component("HeartbeatRequest"), v: api.HeartbeatRequest{}},
	{at: component("TokenResponse"), v: api.TokenResponse{}},
	{at: component("ProductRequest"), v: api.ProductRequest{}},
	{at: component("ProductRequest", "tracker"), v: api.TrackerRequest{}},
	{at: component("RepoInfo"), v: api.RepoInfo{}},
	{at: component("ProfileRequest"), v: api.ProfileRequest{}},
	{at: component("ProfileSummary"), v: api.ProfileSummary{}},
	{at: component("BudgetRequest"), v: api.BudgetRequest{}},
	{at: component("PauseRequest"), v: api.PauseRequest{}},
	{at: component("Budget"), v: api.Budget{}},
	{at: component("Burndown"), v: api.Burndown{}},
	// The manifest may come as its fields instead, body its task: a shape
	// the type leaves to the caller.
	{at: component("IngestRequest"), v: api.IngestRequest{}, extra: []string{"body"}, open: true},
	{at: component("ResendRequest"), v: api.ResendRequest{}},
	{at: component("EchoState"), v: api.EchoState{}},
	{at: component("Explanation"), v: api.Explanation{}},
	{at: component("Explanation", "waiting"), v: api.WaitExplanation{}},
	{at: component("WaitItem"), v: api.WaitItem{}},
	{at: component("Explanation", "profile"), v: api.ProfileExplanation{}},
	{at: component("Explanation", "schedule"), v: api.ScheduleExplanation{}},
	{at: component("Explanation", "schedule", "candidates"), v: api.Candidate{}},
	{at: component("Explanation", "schedule", "candidates", "terms"), v: api.Terms{}},
	{at: component("Metrics"), v: api.Metrics{}},
	{at: component("Metrics", "factories"), v: api.FactoryMetrics{}},
	{at: component("Metrics", "starving"), v: api.StarvingJob{}},
}

// asNumberMaps are api types the document shows as a map of numbers (a
// process's counters, whose names it does not promise): the schema at that
// place must say so and every field of the type must be a number.
var asNumberMaps = []struct {
	at locate
	v  any
}{
	{at: component("Metrics", "coordinator"), v: api.CoordinatorStats{}},
}

// notBodies are the exported struct types of shared/api that are the
// client's own, not a JSON body of the contract.
var notBodies = []string{"Config", "Client", "Request", "Response", "Error", "Event", "StreamRequest", "ListJobsOptions", "ArtifactUpload", "LogRequest"}

// TestOpenAPIMatchesWireTypes: every JSON field of each shared/api body
// type appears in the schema that documents it, and every property of that
// schema is a field of the type; every request schema of the document is
// an api type. A field added to one side only fails here.
func TestOpenAPIMatchesWireTypes(t *testing.T) {
	t.Parallel()
	doc := openAPIDocument()
	for _, tc := range apiWire {
		s := tc.at.find(doc)
		require.NotNil(t, s, "no schema at %s", tc.at.where)
		s = resolve(doc, s)
		props, ok := s["properties"].(obj)
		require.True(t, ok, "%s has no properties", tc.at.where)
		documented := slices.DeleteFunc(slices.Collect(maps.Keys(props)), func(p string) bool { return slices.Contains(tc.extra, p) })
		require.ElementsMatch(t, jsonFields(reflect.TypeOf(tc.v)), documented, "%s vs %T", tc.at.where, tc.v)
		if strings.HasSuffix(tc.at.where, "Request") && !tc.open {
			require.Equal(t, false, s["additionalProperties"], "%s: the server refuses unknown fields", tc.at.where)
		}
	}

	covered := map[string]bool{}
	for _, tc := range apiWire {
		name, _, _ := strings.Cut(reflect.TypeOf(tc.v).Name(), "[")
		covered[name] = true
	}
	for _, tc := range asNumberMaps {
		s := tc.at.find(doc)
		require.NotNil(t, s, "no schema at %s", tc.at.where)
		require.Equal(t, obj{"type": "number"}, s["additionalProperties"], "%s is a map of numbers", tc.at.where)
		typ := reflect.TypeOf(tc.v)
		for i := range typ.NumField() {
			k := typ.Field(i).Type.Kind()
			require.True(t, k >= reflect.Int && k <= reflect.Float64, "%s.%s is a number", typ.Name(), typ.Field(i).Name)
		}
		covered[typ.Name()] = true
	}
	for _, name := range apiStructTypes(t) {
		if slices.Contains(notBodies, name) {
			continue
		}
		require.True(t, covered[name], "api.%s is tied to no schema: add it to apiWire (or to notBodies if it is not a body)", name)
	}

	for name := range doc["components"].(obj)["schemas"].(obj) {
		if !strings.HasSuffix(name, "Request") {
			continue
		}
		found := false
		for _, tc := range apiWire {
			found = found || tc.at.where == name
		}
		require.True(t, found, "request schema %s is tied to no api type", name)
	}
}

// apiStructTypes lists the exported struct types shared/api and
// shared/api/view declare (the views api names by alias).
func apiStructTypes(t *testing.T) []string {
	t.Helper()
	var files []string
	for _, dir := range []string{"../api", "../api/view"} {
		fs, err := filepath.Glob(dir + "/*.go")
		require.NoError(t, err)
		files = append(files, fs...)
	}
	var names []string
	fset := token.NewFileSet()
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		file, err := parser.ParseFile(fset, f, nil, parser.SkipObjectResolution)
		require.NoError(t, err)
		for _, decl := range file.Decls {
			gd, ok := decl.(*ast.GenDecl)
			if !ok || gd.Tok != token.TYPE {
				continue
			}
			for _, spec := range gd.Specs {
				ts := spec.(*ast.TypeSpec)
				if _, isStruct := ts.Type.(*ast.StructType); isStruct && ts.Name.IsExported() {
					names = append(names, ts.Name.Name)
				}
			}
		}
	}
	require.NotEmpty(t, names)
	return names
}
