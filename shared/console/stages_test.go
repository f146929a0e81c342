package console

import (
	"encoding/json"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gigafactory/fleet/shared/fleet"
)

// getMachine fetches StagesFile from h as the page does.
func getMachine(t *testing.T, h http.Handler) machine {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, Prefix+StagesFile, nil))
	require.Equal(t, http.StatusOK, rec.Code)
	require.Equal(t, "application/json", rec.Header().Get("Content-Type"))
	require.Contains(t, rec.Header().Get("Content-Security-Policy"), "default-src 'none'")
	var m machine
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &m))
	return m
}

// The console serves package fleet's stage machine: what app.js listed by
// hand before it read the document.
func TestStagesDocumentIsTheStageMachine(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(Mount(http.NotFoundHandler()))
	t.Cleanup(srv.Close)
	resp, err := http.Get(srv.URL + "/api/console/stages.json")
	require.NoError(t, err)
	var wire map[string]any
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&wire))
	_ = resp.Body.Close()
	require.Equal(t, map[string]any{
		"stages":   []any{"queued", "blocked", "assigned", "building", "review", "testing", "shipped", "failed", "dead_letter", "cancelled"},
		"terminal": []any{"shipped", "failed", "dead_letter", "cancelled"},
		"actions": []any{
			map[string]any{"name": "ship", "from": []any{"review", "testing"}},
			map[string]any{"name": "reject", "from": []any{"review", "testing"}},
			map[string]any{"name": "requeue", "from": []any{"failed", "dead_letter", "cancelled"}},
			map[string]any{"name": "cancel", "from": []any{"queued", "blocked", "assigned", "building", "review", "testing"}},
		},
	}, wire)
}

// A stage and an action added to the stage machine reach the console's
// document, and the page (unchanged) is served beside it.
func TestNewStageAndActionReachTheConsole(t *testing.T) {
	t.Parallel()
	const linting fleet.Stage = "linting"
	stages := slices.Insert(slices.Clone(fleet.Stages), slices.Index(fleet.Stages, fleet.StageTesting), linting)
	rules := append(slices.Clone(fleet.Transitions),
		fleet.Rule{From: fleet.StageBuilding, To: linting, Actor: fleet.ActorFactory, Lease: fleet.LeaseRelease},
		fleet.Rule{From: linting, To: fleet.StageTesting, Actor: fleet.ActorOperator},
		fleet.Rule{From: linting, To: fleet.StageCancelled, Actor: fleet.ActorOperator},
		fleet.Rule{From: fleet.StageFailed, To: fleet.StageTesting, Actor: fleet.ActorOperator})
	actions := append(slices.Clone(fleet.OperatorActions), fleet.OperatorAction{Name: "lintpass", To: fleet.StageTesting})

	h := newHandler(stageMachine(stages, rules, actions))
	m := getMachine(t, h)
	require.Equal(t, stages, m.Stages)
	require.Contains(t, m.Stages, linting)
	from := map[string][]fleet.Stage{}
	for _, a := range m.Actions {
		from[a.Name] = a.From
	}
	require.Equal(t, []fleet.Stage{fleet.StageReview, linting, fleet.StageFailed}, from["lintpass"], "the new action, where the rules allow it")
	require.Contains(t, from["cancel"], linting, "an existing action in the new stage")
	require.Equal(t, "lintpass", m.Actions[len(m.Actions)-1].Name)

	// The page that reads the document is the same file either way.
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, Prefix+"app.js", nil))
	want, err := fs.ReadFile(assets, "assets/app.js")
	require.NoError(t, err)
	require.Equal(t, string(want), rec.Body.String())
}

// The page keeps no copy of the stage machine: no list of stage names, no
// action mapped to stages. It reads StagesFile instead.
func TestConsoleAssetsHoldNoStageMachine(t *testing.T) {
	t.Parallel()
	names := []string{}
	for _, s := range fleet.Stages {
		names = append(names, regexp.QuoteMeta(string(s)))
	}
	stageList := regexp.MustCompile(`\[[^\[\]]*['"` + "`" + `](` + strings.Join(names, "|") + `)['"` + "`" + `]`)
	actions := []string{}
	for _, a := range fleet.OperatorActions {
		actions = append(actions, regexp.QuoteMeta(a.Name))
	}
	actionMap := regexp.MustCompile(`\b(` + strings.Join(actions, "|") + `)['"]?\s*:\s*\[`)
	require.NoError(t, fs.WalkDir(assets, "assets", func(p string, d fs.DirEntry, err error) error {
		if err != nil || !strings.HasSuffix(p, ".js") {
			return err
		}
		b, err := fs.ReadFile(assets, p)
		require.NoError(t, err)
		require.False(t, stageList.Match(b), "%s lists stages: %s", p, stageList.Find(b))
		require.False(t, actionMap.Match(b), "%s maps an action to stages: %s", p, actionMap.Find(b))
		return nil
	}))
	app, err := fs.ReadFile(assets, "assets/app.js")
	require.NoError(t, err)
	require.Contains(t, string(app), "'"+StagesFile+"'", "app.js reads the stage machine from the server")
}
