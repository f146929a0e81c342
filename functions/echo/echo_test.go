package echo_test

import (
	"bytes"
	"context"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gigafactory/fleet/functions/dispatch"
	"github.com/gigafactory/fleet/functions/echo"
	coordecho "github.com/gigafactory/fleet/shared/coord/echo"
	"github.com/gigafactory/fleet/shared/funchost"
	"github.com/gigafactory/fleet/shared/store"
)

// handOffs records the batches handed to the coordinator; a job counts as
// tracked when its document holds a tracker object.
type handOffs struct{ batches [][]store.Item }

func (h *handOffs) EchoChanged(_ context.Context, items []store.Item, _ coordecho.Mode) (coordecho.Run, error) {
	h.batches = append(h.batches, items)
	run := coordecho.Run{}
	for _, it := range items {
		if bytes.Contains(it.Body, []byte(`"tracker":{`)) {
			run.Jobs++
		}
	}
	return run, nil
}

// TestFuncSplitsOnlyBatchesNamingATracker: a batch in which no document
// names a tracker is answered without being split or handed over (nearly
// every batch at steady load; dispatch, which splits the same batch,
// refuses a malformed one); one that does, even where the name is only in
// a task's text, goes to the coordinator whole, and is refused when it
// does not split.
func TestFuncSplitsOnlyBatchesNamingATracker(t *testing.T) {
	t.Parallel()
	plain := json.RawMessage(`{"id":"a","productId":"p1","stage":"queued"}`)
	tracked := json.RawMessage(`{"id":"b","productId":"p1","stage":"queued","tracker":{"system":"jira","key":"FLEET-1"}}`)
	mention := json.RawMessage(`{"id":"c","productId":"p1","stage":"queued","body":"fix the tracker"}`)
	for _, tc := range []struct {
		name      string
		batch     json.RawMessage
		handedOff int // documents handed over; -1: none was
		tracked   int
		log       string
		err       error
	}{
		{"no document names a tracker", funchost.EncodeDocuments([]json.RawMessage{plain, plain}), -1, 0, "batch without a tracked job", nil},
		{"an empty batch", funchost.EncodeDocuments(nil), -1, 0, "batch without a tracked job", nil},
		{"one tracked job of two", funchost.EncodeDocuments([]json.RawMessage{plain, tracked}), 2, 1, "batch of 2, 1 tracked jobs handed to their delivery lanes", nil},
		{"the name only in a task's text", funchost.EncodeDocuments([]json.RawMessage{mention}), 1, 0, "batch of 1, 0 tracked jobs handed to their delivery lanes", nil},
		{"a malformed batch naming a tracker", json.RawMessage(`"[{\"tracker\":"`), -1, 0, "", funchost.ErrBadPayload},
	} {
		h := &handOffs{}
		res, err := echo.Func(h, nil)(t.Context(), &funchost.Invocation{Data: map[string]json.RawMessage{dispatch.DocumentsBinding: tc.batch}})
		if tc.err != nil {
			require.ErrorIs(t, err, tc.err, tc.name)
			require.Empty(t, h.batches, tc.name)
			continue
		}
		require.NoError(t, err, tc.name)
		require.Equal(t, []string{tc.log}, res.Logs, tc.name)
		require.Equal(t, tc.tracked, res.ReturnValue, tc.name)
		if tc.handedOff < 0 {
			require.Empty(t, h.batches, tc.name+": handed over")
			continue
		}
		require.Len(t, h.batches, 1, tc.name)
		require.Len(t, h.batches[0], tc.handedOff, tc.name)
	}
}
