package api_test

import (
	"context"
	"encoding/json"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gigafactory/fleet/functions/api"
	"github.com/gigafactory/fleet/shared/clock"
	"github.com/gigafactory/fleet/shared/coord"
	"github.com/gigafactory/fleet/shared/funchost"
	"github.com/gigafactory/fleet/shared/httpapi"
	"github.com/gigafactory/fleet/shared/store/sqlite"
)

// TestEnvelopeStreamAnswersAsALongPoll: an envelope invocation hands the
// whole answer back in Outputs.res, so a job stream invoked that way must
// end once it has replayed the job's events instead of holding the
// invocation until the stream's 200 s end.
func TestEnvelopeStreamAnswersAsALongPoll(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "fleet.db"))
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, st.Close()) })
	c, err := coord.New(coord.Config{}, coord.Deps{Store: st, Clock: clock.System{}})
	require.NoError(t, err)
	f := api.Func(httpapi.New(c, httpapi.Config{OperatorTokens: []httpapi.OperatorToken{{Name: "ops", Token: operatorToken}}}))

	invoke := func(ctx context.Context, inv *funchost.Invocation) funchost.HTTPResponse {
		t.Helper()
		res, err := f(ctx, inv)
		require.NoError(t, err)
		b, err := json.Marshal(res)
		require.NoError(t, err)
		var out struct {
			Outputs map[string]funchost.HTTPResponse
		}
		require.NoError(t, json.Unmarshal(b, &out))
		return out.Outputs[api.ResponseBinding]
	}
	require.Equal(t, "200", invoke(ctx, envelope(t, "api_put_product.json")).StatusCode)
	created := invoke(ctx, envelope(t, "api_submit_job.json"))
	require.Equal(t, "201", created.StatusCode, created.Body)

	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	start := time.Now()
	res := invoke(sctx, get(t, created.Headers["Location"]+"/events/stream"))
	took := time.Since(start)
	require.Equal(t, "200", res.StatusCode, res.Body)
	require.Contains(t, res.Body, "id: 1\nevent: submitted\n")
	require.Less(t, took, 5*time.Second, "the stream answered once it had sent the replay, not at its end")
}
