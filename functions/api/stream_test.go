package api_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestEnvelopeStreamAnswersAsALongPoll: an envelope invocation hands the
// whole answer back in Outputs.res, so a job stream invoked that way must
// end once it has replayed the job's events instead of holding the
// invocation until the stream's 200 s end.
func TestEnvelopeStreamAnswersAsALongPoll(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	_, f := newFunc(t)
	require.Equal(t, "200", invoke(ctx, t, f, envelope(t, "api_put_product.json")).StatusCode)
	created := invoke(ctx, t, f, envelope(t, "api_submit_job.json"))
	require.Equal(t, "201", created.StatusCode, created.Body)

	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	start := time.Now()
	res := invoke(sctx, t, f, get(t, created.Headers["Location"]+"/events/stream"))
	took := time.Since(start)
	require.Equal(t, "200", res.StatusCode, res.Body)
	require.Contains(t, res.Body, "id: 1\nevent: submitted\n")
	require.Less(t, took, 5*time.Second, "the stream answered once it had sent the replay, not at its end")
}
