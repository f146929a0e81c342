package pulls

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gigafactory/fleet/shared/forge"
)

// TestMergeGate: the gate's rules one by one, and what it says it waits
// for (the coordinator's tests drive the same rules through GitHub's
// double).
func TestMergeGate(t *testing.T) {
	t.Parallel()
	ok := forge.Check{Name: "ci", Completed: true, Conclusion: "success"}
	var failing []forge.Check
	for i := range 8 {
		failing = append(failing, forge.Check{Name: fmt.Sprintf("shard-%d", i), Completed: true, Conclusion: "failure"})
	}
	for _, tc := range []struct {
		name     string
		required []string
		checks   []forge.Check
		statuses []forge.Status
		want     string // "" : it may merge
	}{
		{name: "nothing reported, nothing required", want: "waiting for a check run or commit status to be reported on the head " +
			"(none is yet; forge.requiredChecks names the ones to wait for)"},
		{name: "nothing reported, one required", required: []string{"ci"}, want: "waiting for required check ci (not reported)"},
		{name: "a running check", checks: []forge.Check{{Name: "ci"}}, want: "waiting for check ci (running)"},
		{name: "neutral and skipped pass", checks: []forge.Check{ok, {Name: "a", Completed: true, Conclusion: "neutral"},
			{Name: "b", Completed: true, Conclusion: "skipped"}}},
		{name: "a conclusion nobody knows", checks: []forge.Check{{Name: "ci", Completed: true, Conclusion: "mystery"}},
			want: "waiting for check ci (mystery)"},
		{name: "a required status", required: []string{"ci/jenkins"}, checks: []forge.Check{ok},
			statuses: []forge.Status{{Context: "ci/jenkins", State: forge.StatusSuccess}}},
		{name: "a required check running and a status pending", required: []string{"ci"}, checks: []forge.Check{{Name: "ci"}},
			statuses: []forge.Status{{Context: "sonar", State: forge.StatusPending}}, want: "waiting for check ci (running), status sonar (pending)"},
		{name: "many failing, five named", checks: failing,
			want: "waiting for check shard-0 (failure), check shard-1 (failure), check shard-2 (failure), check shard-3 (failure), check shard-4 (failure), 3 more"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			merge, why := mergeGate(tc.required, tc.checks, tc.statuses)
			require.Equal(t, tc.want == "", merge, why)
			require.Equal(t, tc.want, why)
		})
	}
}
