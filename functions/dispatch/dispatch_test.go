package dispatch_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/gigafactory/fleet/shared/coord/catalog"

	"github.com/gigafactory/fleet/shared/store"

	"github.com/stretchr/testify/require"

	"github.com/gigafactory/fleet/functions/dispatch"
	"github.com/gigafactory/fleet/shared/clock"
	"github.com/gigafactory/fleet/shared/coord"
	"github.com/gigafactory/fleet/shared/funchost"
	"github.com/gigafactory/fleet/shared/protocol"
	"github.com/gigafactory/fleet/shared/store/sqlite"
)

// envelope reads an invocation sample from functions/testdata.
func envelope(t *testing.T, name string) *funchost.Invocation {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "testdata", name))
	require.NoError(t, err)
	var inv funchost.Invocation
	require.NoError(t, json.Unmarshal(b, &inv), name)
	return &inv
}

// missingJob is the document dispatch_missing.json carries: a queued job of
// p1 no store in these tests has.
const missingJob = "j018f2b6c1a3b7e21d0ff"

func TestItems(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		raw     json.RawMessage
		want    []store.Item // Body is checked separately
		wantErr string
	}{
		{name: "host batch, _etag becomes Rev", raw: envelope(t, "dispatch_missing.json").Data[dispatch.DocumentsBinding],
			want: []store.Item{{ID: missingJob, PartitionKey: "p1", Rev: `"0100d1a2-0000-0d00-0000-6745f1c50000"`}}},
		{name: "two documents in feed order",
			raw: funchost.EncodeDocuments([]json.RawMessage{
				json.RawMessage(`{"id":"b","productId":"p2","_etag":"\"2\""}`),
				json.RawMessage(`{"id":"a","productId":"p1","_etag":"\"1\""}`),
			}),
			want: []store.Item{{ID: "b", PartitionKey: "p2", Rev: `"2"`}, {ID: "a", PartitionKey: "p1", Rev: `"1"`}}},
		{name: "no _etag: no revision", raw: json.RawMessage(`[{"id":"a","productId":"p1"}]`),
			want: []store.Item{{ID: "a", PartitionKey: "p1"}}},
		{name: "a name in another case: encoding/json's match", raw: json.RawMessage(`[{"ID":"a","productId":"p1","_ETag":"\"3\""}]`),
			want: []store.Item{{ID: "a", PartitionKey: "p1", Rev: `"3"`}}},
		{name: "empty batch", raw: envelope(t, "dispatch_empty.json").Data[dispatch.DocumentsBinding], want: []store.Item{}},
		{name: "document without productId", raw: funchost.EncodeDocuments([]json.RawMessage{json.RawMessage(`{"id":"a"}`)}),
			wantErr: "document 0 has no id or productId"},
		{name: "document that is not an object", raw: json.RawMessage(`[{"id":"a","productId":"p1"},7]`),
			wantErr: "document 1"},
		{name: "not a batch", raw: json.RawMessage(`{"id":"a"}`), wantErr: "want a JSON array"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			items, err := dispatch.Items(tc.raw)
			if tc.wantErr != "" {
				require.ErrorIs(t, err, funchost.ErrBadPayload)
				require.ErrorContains(t, err, tc.wantErr)
				return
			}
			require.NoError(t, err)
			require.Len(t, items, len(tc.want))
			for i := range items {
				var doc struct {
					ID string `json:"id"`
				}
				require.NoError(t, json.Unmarshal(items[i].Body, &doc), "Body is the document")
				require.Equal(t, tc.want[i].ID, doc.ID)
				items[i].Body = nil
			}
			require.Equal(t, tc.want, items)
		})
	}
}

// recorder is a Publisher that keeps what it is given, or fails.
type recorder struct {
	mu   sync.Mutex
	msgs []protocol.DispatchMessage
	err  error
}

func (r *recorder) Publish(_ context.Context, m protocol.DispatchMessage) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.err != nil {
		return r.err
	}
	r.msgs = append(r.msgs, m)
	return nil
}

func (r *recorder) published() []protocol.DispatchMessage {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]protocol.DispatchMessage(nil), r.msgs...)
}

type fixture struct {
	store *sqlite.Store
	c     *coord.Coordinator
	pub   *recorder
	jobID string
}

// newFixture is a coordinator on a fresh SQLite file with product p1, one
// factory able to take its jobs, and one queued job not yet dispatched.
func newFixture(t *testing.T) *fixture {
	t.Helper()
	ctx := t.Context()
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "fleet.db"))
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, st.Close()) })
	f := &fixture{store: st, pub: &recorder{}}
	f.c, err = coord.New(coord.Config{}, coord.Deps{Store: st, Clock: clock.System{}, Publisher: f.pub})
	require.NoError(t, err)
	_, err = f.c.PutProduct(ctx, "p1", "Product one", []string{"notes"})
	require.NoError(t, err)
	caps := []string{"os:linux", "engine:claude", "has:git"}
	_, secret, err := f.c.Enroll(ctx, catalog.EnrollRequest{FactoryID: "f1", Capabilities: caps, SeatLimit: 2})
	require.NoError(t, err)
	tok, err := f.c.AuthenticateFactory(ctx, secret)
	require.NoError(t, err)
	_, err = f.c.Heartbeat(ctx, tok, catalog.Heartbeat{Capabilities: caps, Repos: []string{"notes"}})
	require.NoError(t, err)
	j, created, err := f.c.Submit(ctx, "p1", []byte("---\nrepo: notes\ntitle: a job\ncapabilities: [engine:claude]\n---\nDo the thing.\n"))
	require.NoError(t, err)
	require.True(t, created)
	f.jobID = j.ID
	require.Empty(t, f.pub.published(), "submitting must not dispatch: the change feed does")
	return f
}

// feedDoc is the stored job as the change feed hands it out: the document
// with Cosmos's system properties, _etag carrying the revision.
func (f *fixture) feedDoc(t *testing.T) json.RawMessage {
	t.Helper()
	it, err := f.store.Read(t.Context(), store.Jobs, "p1", f.jobID)
	require.NoError(t, err)
	var doc map[string]any
	require.NoError(t, json.Unmarshal(it.Body, &doc))
	doc["_etag"], doc["_ts"], doc["_lsn"] = it.Rev, 1793010115, 44
	b, err := json.Marshal(doc)
	require.NoError(t, err)
	return b
}

// batchWithMissing is the stored job followed by the sample's document the
// store does not have, encoded as the host encodes a batch.
func (f *fixture) batchWithMissing(t *testing.T) *funchost.Invocation {
	t.Helper()
	gone, err := funchost.Documents(envelope(t, "dispatch_missing.json").Data[dispatch.DocumentsBinding])
	require.NoError(t, err)
	require.Len(t, gone, 1)
	return &funchost.Invocation{Data: map[string]json.RawMessage{
		dispatch.DocumentsBinding: funchost.EncodeDocuments([]json.RawMessage{f.feedDoc(t), gone[0]}),
	}}
}

// decisions reads the ReturnValue as the host would receive it.
func decisions(t *testing.T, res *funchost.Result) map[string]coord.Decision {
	t.Helper()
	b, err := json.Marshal(res.ReturnValue)
	require.NoError(t, err)
	var list []coord.Decision
	require.NoError(t, json.Unmarshal(b, &list))
	out := map[string]coord.Decision{}
	for _, d := range list {
		out[d.JobID] = d
	}
	return out
}

func TestFunc(t *testing.T) {
	t.Parallel()

	t.Run("a document the store no longer has is skipped", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t)
		res, err := dispatch.Func(f.c, nil)(t.Context(), f.batchWithMissing(t))
		require.NoError(t, err, "a deleted job is not a failed batch")
		require.Equal(t, []string{"batch of 2, 1 published"}, res.Logs)
		got := decisions(t, res)
		require.Equal(t, coord.Decision{JobID: f.jobID, Target: "f1", DispatchEpoch: 1}, got[f.jobID])
		require.Equal(t, coord.Decision{JobID: missingJob, Skipped: coord.SkipGone}, got[missingJob])

		msgs := f.pub.published()
		require.Len(t, msgs, 1)
		require.Equal(t, f.jobID, msgs[0].JobID)
		require.Equal(t, "f1", msgs[0].TargetFactoryID)
		require.Equal(t, f.jobID+":1", msgs[0].MessageID())
		_, err = f.store.Read(t.Context(), store.Jobs, "p1", missingJob)
		require.ErrorIs(t, err, store.ErrNotFound, "skipping must not recreate the job")
	})

	t.Run("a redelivered batch publishes nothing twice", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t)
		inv := f.batchWithMissing(t)
		fn := dispatch.Func(f.c, nil)
		_, err := fn(t.Context(), inv)
		require.NoError(t, err)
		// The same (now stale) documents again, as after a host restart
		// before its checkpoint was written.
		res, err := fn(t.Context(), inv)
		require.NoError(t, err)
		require.Equal(t, coord.SkipDispatched, decisions(t, res)[f.jobID].Skipped)
		require.Len(t, f.pub.published(), 1)
	})

	t.Run("an empty batch", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t)
		res, err := dispatch.Func(f.c, nil)(t.Context(), envelope(t, "dispatch_empty.json"))
		require.NoError(t, err)
		require.Equal(t, []string{"batch of 0, 0 published"}, res.Logs)
		require.Empty(t, decisions(t, res))
		require.Empty(t, f.pub.published())
	})

	t.Run("a failed publish fails the invocation", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t)
		f.pub.err = errors.New("broker unreachable")
		_, err := dispatch.Func(f.c, nil)(t.Context(), f.batchWithMissing(t))
		require.ErrorContains(t, err, "dispatch batch of 2: 0 published")
		require.ErrorContains(t, err, "broker unreachable")
	})

	t.Run("no documents binding", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t)
		_, err := dispatch.Func(f.c, nil)(t.Context(), &funchost.Invocation{Data: map[string]json.RawMessage{}})
		require.ErrorIs(t, err, funchost.ErrBadPayload)
	})

	t.Run("a bad document fails before anything is dispatched", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t)
		inv := &funchost.Invocation{Data: map[string]json.RawMessage{
			dispatch.DocumentsBinding: funchost.EncodeDocuments([]json.RawMessage{f.feedDoc(t), json.RawMessage(`{"id":"x"}`)}),
		}}
		_, err := dispatch.Func(f.c, nil)(t.Context(), inv)
		require.ErrorIs(t, err, funchost.ErrBadPayload)
		require.Empty(t, f.pub.published())
	})
}

// TestFuncThroughServer checks the wire: the host's double-encoded batch in,
// the envelope out.
func TestFuncThroughServer(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	srv := funchost.NewServer(nil, "", nil)
	srv.Handle(dispatch.Name, dispatch.Func(f.c, nil))
	body, err := json.Marshal(f.batchWithMissing(t))
	require.NoError(t, err)
	res, status := post(t, srv, "/"+dispatch.Name, body)
	require.Equal(t, 200, status)
	require.Contains(t, res.Logs, "batch of 2, 1 published")
	require.Len(t, f.pub.published(), 1)
}

func post(t *testing.T, srv *funchost.Server, path string, body []byte) (funchost.Result, int) {
	t.Helper()
	rec := httptest.NewRecorder()
	srv.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, path, bytes.NewReader(body)))
	var res funchost.Result
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &res), rec.Body.String())
	return res, rec.Code
}
