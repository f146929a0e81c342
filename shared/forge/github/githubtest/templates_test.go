package githubtest

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gigafactory/fleet/shared/forge/github/githubtest/octokit"
)

// -update rewrites templates/ from GitHub's descriptions.
var update = flag.Bool("update", false, "rewrite templates/ from @octokit/openapi and @octokit/openapi-webhooks")

// restTemplates are the REST answers the double fills in, each from the
// example GitHub's description gives for it.
var restTemplates = map[string]string{
	"rest-pull":        "pull-request",
	"rest-pull-simple": "pull-request-simple-items", // its first item
	"rest-repo":        "full-repository-default-response",
	"rest-merge":       "pull-request-merge-result-response-if-merge-was-successful",
	"rest-check-run":   "check-run-paginated", // the first of its check_runs
	"rest-git-ref":     "git-ref",
	// its statuses[0] is the double's template of one status
	"rest-combined-status": "combined-commit-status",
	"rest-review-comment":  "review-comment-items", // its first item
}

// webhookTemplates are the payloads the double sends: the smallest
// instance of each webhook's schema (every required field, nothing more),
// made by minimal below, with the actions the double sends.
var webhookTemplates = map[string]map[string]any{
	"pull-request-review-submitted": {"action": "submitted"},
	"check-run-completed":           {"action": "completed"},
	"pull-request-closed":           {"action": "closed"},
	"status":                        {},
}

// TestTemplates: each template is what GitHub's description makes it
// (-update writes them), and each is valid against its schema.
func TestTemplates(t *testing.T) {
	octokit.Need(t)
	if *update {
		writeTemplates(t)
	}
	hooks, err := octokit.LoadWebhooks()
	require.NoError(t, err)
	for name := range webhookTemplates {
		b, err := templates.ReadFile("templates/webhook-" + name + ".json")
		require.NoError(t, err)
		require.NoError(t, hooks.Validate(name, b), name)
	}
	for name := range restTemplates {
		_, err := templates.ReadFile("templates/" + name + ".json")
		require.NoError(t, err, "run go test ./shared/forge/github/githubtest -update")
	}
}

func writeTemplates(t *testing.T) {
	t.Helper()
	read := func(path string) map[string]any {
		b, err := os.ReadFile(path)
		require.NoError(t, err)
		var m map[string]any
		require.NoError(t, json.Unmarshal(b, &m))
		return m
	}
	rest := read(octokit.RESTPath())
	examples := rest["components"].(map[string]any)["examples"].(map[string]any)
	for file, name := range restTemplates {
		v := examples[name].(map[string]any)["value"]
		switch name {
		case "pull-request-simple-items":
			v = v.([]any)[0]
		case "check-run-paginated":
			v = v.(map[string]any)["check_runs"].([]any)[0]
		case "review-comment-items":
			v = v.([]any)[0]
		}
		// Where GitHub's examples fail their own schemas (the team in
		// requested_teams lacks "type"; the repository's "source" lacks
		// "language"), the optional part is left out.
		if m, ok := v.(map[string]any); ok {
			if _, ok := m["requested_teams"]; ok {
				m["requested_teams"] = []any{}
			}
			delete(m, "source")
			delete(m, "parent")
			if _, ok := m["language"]; !ok && file == "rest-repo" {
				m["language"] = "Go" // required, absent from the example
			}
		}
		writeJSONFile(t, file, v)
	}
	hooksDoc := read(octokit.WebhooksPath())
	schemas := hooksDoc["components"].(map[string]any)["schemas"].(map[string]any)
	for name, overlay := range webhookTemplates {
		g := &generator{schemas: schemas, oneItem: map[string]bool{"check_run.pull_requests": true, "branches": true}}
		v := g.minimal(map[string]any{"$ref": "#/components/schemas/webhook-" + name}, "").(map[string]any)
		for k, o := range overlay {
			v[k] = o
		}
		writeJSONFile(t, "webhook-"+name, v)
	}
}

func writeJSONFile(t *testing.T, name string, v any) {
	t.Helper()
	b, err := json.MarshalIndent(v, "", "  ")
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join("templates", name+".json"), append(b, '\n'), 0o644))
}

// generator makes the smallest instance of a schema: every required
// property, the first enum value or alternative, one item where an array
// needs one. Schemas are JSON Schema 2020-12 as OpenAPI 3.1 writes them.
type generator struct {
	schemas map[string]any
	// oneItem are the arrays (by dotted path) given one item though the
	// schema needs none: a check run's pull requests.
	oneItem map[string]bool
}

func (g *generator) resolve(s map[string]any) map[string]any {
	for {
		ref, ok := s["$ref"].(string)
		if !ok {
			return s
		}
		s = g.schemas[strings.TrimPrefix(ref, "#/components/schemas/")].(map[string]any)
	}
}

func (g *generator) minimal(s map[string]any, path string) any {
	if strings.Count(path, ".") > 40 {
		panic("githubtest: schema too deep")
	}
	s = g.resolve(s)
	if c, ok := s["const"]; ok {
		return c
	}
	if e, ok := s["enum"].([]any); ok && len(e) > 0 {
		for _, v := range e {
			if v != nil {
				return v
			}
		}
		return e[0]
	}
	if all, ok := s["allOf"].([]any); ok {
		out := map[string]any{}
		for _, sub := range all {
			if m, ok := g.minimal(sub.(map[string]any), path).(map[string]any); ok {
				for k, v := range m {
					out[k] = v
				}
			}
		}
		return out
	}
	for _, key := range []string{"oneOf", "anyOf"} {
		if alts, ok := s[key].([]any); ok && len(alts) > 0 {
			for _, a := range alts {
				if typ, _ := g.resolve(a.(map[string]any))["type"].(string); typ != "null" {
					return g.minimal(a.(map[string]any), path)
				}
			}
			return nil
		}
	}
	typ := s["type"]
	if list, ok := typ.([]any); ok {
		typ = nil
		for _, x := range list {
			if x != "null" {
				typ = x
				break
			}
		}
		if typ == nil {
			return nil
		}
	}
	switch typ {
	case "object", nil:
		out := map[string]any{}
		props, _ := s["properties"].(map[string]any)
		req, _ := s["required"].([]any)
		names := make([]string, 0, len(req))
		for _, r := range req {
			names = append(names, r.(string))
		}
		sort.Strings(names)
		for _, n := range names {
			p, ok := props[n].(map[string]any)
			if !ok {
				out[n] = "x"
				continue
			}
			out[n] = g.minimal(p, strings.TrimPrefix(path+"."+n, "."))
		}
		return out
	case "array":
		min, _ := s["minItems"].(float64)
		items := []any{}
		if min > 0 || g.oneItem[path] {
			if it, ok := s["items"].(map[string]any); ok {
				items = append(items, g.minimal(it, path+"[]"))
			}
		}
		return items
	case "string":
		switch s["format"] {
		case "date-time":
			return "2026-11-27T00:00:00Z"
		case "uri", "uri-template":
			return "https://github.com/example"
		case "email":
			return "octocat@github.com"
		}
		return "x"
	case "integer":
		if m, ok := s["minimum"].(float64); ok {
			return int(m)
		}
		return 1
	case "number":
		return 1
	case "boolean":
		return false
	case "null":
		return nil
	}
	panic(fmt.Sprintf("githubtest: schema type %v", typ))
}
