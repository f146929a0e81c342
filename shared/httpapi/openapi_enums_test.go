package httpapi

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gigafactory/fleet/shared/coord"
	"github.com/gigafactory/fleet/shared/fleet"
)

// TestOpenAPIEnumsListEveryConstant: every enum of the document that
// stands for a Go string type lists exactly the constants declared of that
// type, read from the source of the type's package, so a constant added
// there (a priority, an alert kind) without reaching the document fails
// here. An empty constant (a plain release, a task) is the field left out
// and is not listed.
func TestOpenAPIEnumsListEveryConstant(t *testing.T) {
	t.Parallel()
	doc := openAPIDocument()
	op := func(method, path string) obj {
		return doc["paths"].(obj)[path].(obj)[strings.ToLower(method)].(obj)
	}
	param := func(method, path, name string) obj {
		for _, p := range op(method, path)["parameters"].([]obj) {
			if p["name"] == name {
				return p["schema"].(obj)
			}
		}
		require.FailNow(t, "no parameter", "%s %s %s", method, path, name)
		return nil
	}
	schema := func(path ...string) obj {
		s := doc["components"].(obj)["schemas"].(obj)[path[0]].(obj)
		for _, p := range path[1:] {
			s = s["properties"].(obj)[p].(obj)
			if items, ok := s["items"].(obj); ok {
				s = items
			}
		}
		return s
	}
	for _, tc := range []struct {
		name string
		of   any // a value of the constants' type
		// each lists every constant; split lists them between its enums,
		// each constant in one.
		each, split []obj
		extra       []string // values beyond the constants
	}{
		{name: "stage", of: fleet.Stage(""), each: []obj{schema("Stage"), schema("PatchRequest", "stage")}},
		{name: "priority", of: fleet.Priority(""), each: []obj{schema("Job", "priority")}},
		{name: "depsMode", of: fleet.DepsMode(""),
			each: []obj{schema("Job", "depsMode"), schema("DAG", "nodes", "depsMode"), schema("Explanation", "waiting", "depsMode")}},
		{name: "job kind", of: fleet.JobKind(""), each: []obj{schema("Job", "kind"), schema("DAG", "nodes", "kind")}},
		{name: "unroutable kind", of: fleet.UnroutableKind(""),
			each: []obj{schema("Job", "dispatch", "unroutableKind"), schema("Explanation", "dispatch", "unroutableKind")}},
		{name: "hold kind", of: fleet.HoldKind(""),
			split: []obj{schema("Explanation", "budget", "kind"), schema("Explanation", "seatCap", "kind")}},
		{name: "run result", of: fleet.RunResult(""), each: []obj{schema("Run", "result")}},
		{name: "release outcome", of: fleet.ReleaseOutcome(""), each: []obj{schema("ReleaseRequest", "outcome")}},
		{name: "event type", of: fleet.EventType(""), each: []obj{schema("Event", "type"), schema("RecentEvent", "type")}},
		{name: "actor", of: fleet.Actor(""), each: []obj{schema("Event", "actor"), schema("RecentEvent", "actor")}},
		{name: "review onReject", of: fleet.OnReject(""), each: []obj{schema("Review", "onReject")}},
		{name: "artifact kind", of: fleet.ArtifactKind(""),
			each: []obj{schema("Artifact", "kind"), param("POST", "/fleet/jobs/{id}/artifacts", "kind")}},
		{name: "factory kind", of: fleet.FactoryKind(""), each: []obj{schema("Factory", "kind"), schema("EnrollRequest", "kind")}},
		{name: "health", of: fleet.Health(""), each: []obj{schema("Factory", "health")}},
		{name: "alert kind", of: fleet.AlertKind(""), each: []obj{schema("Metrics", "alerts", "kind")}},
		{name: "severity", of: fleet.Severity(""), each: []obj{schema("Metrics", "alerts", "severity")}},
		{name: "budget period", of: fleet.BudgetPeriod(""), each: []obj{schema("Budget", "period"), schema("BudgetRequest", "period")}},
		{name: "pause reason", of: fleet.PauseReason(""), each: []obj{schema("Budget", "pausedReason")}},
		{name: "error code", of: fleet.Code(""), each: []obj{schema("Error", "error", "code")},
			extra: []string{string(codeMethodNotAllowed), string(codeInternal)}},
		{name: "operator action", of: coord.Action(""), each: []obj{param("POST", "/fleet/jobs/{id}/actions/{action}", "action")}},
	} {
		want := append(constantsOf(t, reflect.TypeOf(tc.of)), tc.extra...)
		require.NotEmpty(t, want, tc.name)
		for _, e := range tc.each {
			require.ElementsMatch(t, want, enumValues(e), "%s: the document's enum against the constants", tc.name)
		}
		if tc.split != nil {
			var all []string
			for _, e := range tc.split {
				all = append(all, enumValues(e)...)
			}
			require.ElementsMatch(t, want, all, "%s: the document's enums against the constants", tc.name)
		}
	}
	// A factory reports every health but stale, which only its silence
	// earns: the heartbeat's enum is the list fleet.ParseHealth takes.
	require.Equal(t, stringsOf(fleet.ReportedHealths()), enumValues(schema("HeartbeatRequest", "health")))
}

// enumValues are the strings of a schema's enum (null left out).
func enumValues(schema obj) []string {
	var out []string
	switch e := schema["enum"].(type) {
	case []string:
		out = e
	case []any:
		for _, v := range e {
			if s, ok := v.(string); ok {
				out = append(out, s)
			}
		}
	}
	return out
}

func stringsOf[T ~string](values []T) []string {
	out := make([]string, len(values))
	for i, v := range values {
		out[i] = string(v)
	}
	return out
}

// constantsOf reads the non-empty string constants declared of type typ in
// the source of its package (under this module).
func constantsOf(t *testing.T, typ reflect.Type) []string {
	t.Helper()
	mod, err := os.ReadFile(filepath.Join("..", "..", "go.mod"))
	require.NoError(t, err)
	modLine, _, _ := strings.Cut(string(mod), "\n")
	modPath := strings.TrimSpace(strings.TrimPrefix(modLine, "module"))
	rel, ok := strings.CutPrefix(typ.PkgPath(), modPath+"/")
	require.True(t, ok, "%s is not in module %s", typ, modPath)
	dir := filepath.Join("..", "..", filepath.FromSlash(rel))

	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	require.NoError(t, err)
	fset := token.NewFileSet()
	var values []string
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.SkipObjectResolution)
		require.NoError(t, err)
		for _, decl := range f.Decls {
			gd, ok := decl.(*ast.GenDecl)
			if !ok || gd.Tok != token.CONST {
				continue
			}
			for _, spec := range gd.Specs {
				vs := spec.(*ast.ValueSpec)
				if id, ok := vs.Type.(*ast.Ident); !ok || id.Name != typ.Name() {
					continue
				}
				for _, v := range vs.Values {
					lit, ok := v.(*ast.BasicLit)
					require.True(t, ok && lit.Kind == token.STRING, "%s: a %s constant that is not a string literal", fset.Position(v.Pos()), typ)
					s, err := strconv.Unquote(lit.Value)
					require.NoError(t, err)
					if s != "" {
						values = append(values, s)
					}
				}
			}
		}
	}
	return values
}
