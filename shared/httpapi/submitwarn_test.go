package httpapi

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gigafactory/fleet/shared/api"
)

// TestSubmitWarnings: a job no enrolled factory could ever run is stored
// and answered with a warning saying why; one a factory can run (even a
// busy one) has none, and neither has the same job submitted again once
// the fleet can run it.
func TestSubmitWarnings(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.putProduct("p1", "r1")
	f.enroll("f1", []string{"p1"}, "r1")
	const gpuManifest = "---\ntitle: Train\nrepo: r1\ncapabilities: [gpu:h100]\nidempotencyKey: gpu-1\n---\nTrain it.\n"

	var gpu api.Submitted
	res := f.ok(201, &gpu, "POST", "/api/fleet/jobs", rootToken, gpuManifest, product("p1"), contentType("text/markdown"))
	require.Equal(t, []string{"no factory has capability gpu:h100"}, gpu.Warnings, "%s", res.body)
	require.NotEmpty(t, gpu.ID, "the job is stored all the same")
	require.Equal(t, "p1", gpu.ProductID, "the job's fields sit beside the warnings")

	var plain api.Submitted
	res = f.ok(201, &plain, "POST", "/api/fleet/jobs", rootToken, manifest("r1"), product("p1"), contentType("text/markdown"))
	require.Empty(t, plain.Warnings)
	require.NotContains(t, string(res.body), `"warnings"`, "absent when nothing keeps the job from running")

	var again api.Submitted
	f.ok(200, &again, "POST", "/api/fleet/jobs", rootToken, map[string]any{"manifest": gpuManifest}, product("p1"))
	require.Equal(t, gpu.ID, again.ID)
	require.Equal(t, gpu.Warnings, again.Warnings, "the same job again says the same")
}
