package fleet_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gigafactory/fleet/shared/fleet"
)

// TestParseNamesTheChoices: each Parse function accepts every value of its
// list, and its refusal names the list as clients have always read it.
func TestParseNamesTheChoices(t *testing.T) {
	t.Parallel()
	accepts := func(parse func(string, string) (string, error), values ...string) {
		t.Helper()
		for _, v := range values {
			got, err := parse("f", v)
			require.NoError(t, err, v)
			require.Equal(t, v, got)
		}
	}
	for _, tc := range []struct {
		name   string
		parse  func(field, s string) (string, error)
		values []string
		want   string
	}{
		{"priority", wrap(fleet.ParsePriority), names(fleet.Priorities()),
			`unknown priority "x" (want low, normal, high or critical)`},
		{"artifact kind", wrap(fleet.ParseArtifactKind), names(fleet.ArtifactKinds()),
			`unknown kind "x" (want log, diff, report or other)`},
		{"health", wrap(fleet.ParseHealth), names(fleet.ReportedHealths()),
			`unknown health "x" (want ok, degraded or down)`},
		{"onReject", wrap(fleet.ParseOnReject), names(fleet.OnRejects()),
			`unknown onReject "x" (want requeue or fail)`},
		{"period", wrap(fleet.ParseBudgetPeriod), names(fleet.BudgetPeriods()),
			`unknown period "x" (want month or total)`},
		{"release outcome", wrap(fleet.ParseReleaseOutcome), names(fleet.ReleaseOutcomes()),
			`unknown outcome "x" (want cancelled, preempted, or none for a plain release)`},
		{"stage", wrap(fleet.ParseStage), names(fleet.Stages),
			`unknown stage "x" (want one of queued, blocked, assigned, building, review, testing, shipped, failed, dead_letter, cancelled)`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			accepts(tc.parse, tc.values...)
			_, err := tc.parse("f", "x")
			require.Equal(t, fleet.CodeInvalid, fleet.CodeOf(err))
			require.Equal(t, tc.want, err.(*fleet.Error).Message)
		})
	}
	_, err := fleet.ParseManifest([]byte("---\nrepo: r\ndepsMode: x\n---\nDo it.\n"))
	require.ErrorContains(t, err, `unknown depsMode "x" (want all or any)`)
}

// TestHealthsReportedAreHealths: what a factory may report is a health
// it may show, less stale.
func TestHealthsReportedAreHealths(t *testing.T) {
	t.Parallel()
	require.Subset(t, fleet.Healths(), fleet.ReportedHealths())
	require.NotContains(t, fleet.ReportedHealths(), fleet.HealthStale)
}

func wrap[T ~string](parse func(field, s string) (T, error)) func(string, string) (string, error) {
	return func(field, s string) (string, error) {
		v, err := parse(field, s)
		return string(v), err
	}
}

func names[T ~string](values []T) []string {
	out := make([]string, len(values))
	for i, v := range values {
		out[i] = string(v)
	}
	return out
}
