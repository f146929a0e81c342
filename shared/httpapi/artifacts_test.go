package httpapi

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gigafactory/fleet/shared/api"
	"github.com/gigafactory/fleet/shared/fleet"
)

// TestArtifactRoutes: the holder uploads its run's log, anyone in the
// product lists and reads it, downloads it with its digest as ETag (304 on
// a match), and an operator deletes it.
func TestArtifactRoutes(t *testing.T) {
	t.Parallel()
	w := newAuthzWorld(t)
	f := w.f
	held := "/api/fleet/jobs/" + w.held
	epoch := strconv.FormatInt(w.heldEpoch, 10)
	log := []byte("engine output \x00\xff binary-safe\n" + strings.Repeat("line\n", 5000))
	sum := sha256.Sum256(log)

	var a fleet.Artifact
	res := f.ok(http.StatusCreated, &a, "POST", held+"/artifacts?name=output.log&kind=log&leaseEpoch="+epoch, w.f1, log,
		contentType("text/plain; charset=utf-8"))
	require.Equal(t, "/api/fleet/artifacts/"+a.ID, res.header.Get("Location"))
	require.Equal(t, hex.EncodeToString(sum[:]), a.SHA256)
	require.Equal(t, int64(len(log)), a.Size)
	require.Equal(t, fleet.RunID(w.held, w.heldEpoch), a.RunID)
	require.Equal(t, fleet.ArtifactLog, a.Kind)

	var list api.List[fleet.Artifact]
	f.ok(http.StatusOK, &list, "GET", held+"/artifacts", rootToken, nil)
	require.Len(t, list.Items, 2, "the world's operator artifact and this one")
	require.Contains(t, list.Items, a)
	var got fleet.Artifact
	f.ok(http.StatusOK, &got, "GET", "/api/fleet/artifacts/"+a.ID, w.f1, nil)
	require.Equal(t, a, got)

	res = f.ok(http.StatusOK, nil, "GET", "/api/fleet/artifacts/"+a.ID+"/content", rootToken, nil)
	require.Equal(t, log, res.body)
	body := sha256.Sum256(res.body)
	require.Equal(t, a.SHA256, hex.EncodeToString(body[:]))
	require.Equal(t, `"`+a.SHA256+`"`, res.header.Get("ETag"))
	require.Equal(t, "text/plain; charset=utf-8", res.header.Get("Content-Type"))
	require.Equal(t, strconv.Itoa(len(log)), res.header.Get("Content-Length"))
	require.Equal(t, "nosniff", res.header.Get("X-Content-Type-Options"))
	require.Equal(t, `attachment; filename=output.log`, res.header.Get("Content-Disposition"))

	for _, inm := range []string{`"` + a.SHA256 + `"`, `W/"` + a.SHA256 + `"`, `"other", "` + a.SHA256 + `"`, "*"} {
		res = f.call("GET", "/api/fleet/artifacts/"+a.ID+"/content", rootToken, nil, header("If-None-Match", inm))
		require.Equal(t, http.StatusNotModified, res.status, inm)
		require.Empty(t, res.body)
		require.Equal(t, `"`+a.SHA256+`"`, res.header.Get("ETag"))
	}
	res = f.call("GET", "/api/fleet/artifacts/"+a.ID+"/content", rootToken, nil, header("If-None-Match", `"stale"`))
	require.Equal(t, http.StatusOK, res.status)

	var evs api.List[fleet.Event]
	f.ok(http.StatusOK, &evs, "GET", held+"/events", rootToken, nil)
	require.Equal(t, fleet.EventArtifactAdded, evs.Items[len(evs.Items)-1].Type)

	f.ok(http.StatusNoContent, nil, "DELETE", "/api/fleet/artifacts/"+a.ID, rootToken, nil)
	require.Equal(t, http.StatusNotFound, f.call("GET", "/api/fleet/artifacts/"+a.ID, rootToken, nil).status)
	require.Equal(t, http.StatusNotFound, f.call("GET", "/api/fleet/artifacts/"+a.ID+"/content", rootToken, nil).status)
	require.Equal(t, http.StatusNotFound, f.call("DELETE", "/api/fleet/artifacts/"+a.ID, rootToken, nil).status)
	f.ok(http.StatusOK, &evs, "GET", held+"/events", rootToken, nil)
	require.Equal(t, fleet.EventArtifactDeleted, evs.Items[len(evs.Items)-1].Type)
}

// TestArtifactUploadRefusals: too large (declared or streamed), fenced,
// chunked and malformed uploads are refused with their status and field,
// and nothing is stored, bytes included.
func TestArtifactUploadRefusals(t *testing.T) {
	t.Parallel()
	w := newAuthzWorld(t)
	f := w.f
	held := "/api/fleet/jobs/" + w.held + "/artifacts"
	epoch := strconv.FormatInt(w.heldEpoch, 10)
	stale := strconv.FormatInt(w.heldEpoch-1, 10)
	big := bytes.Repeat([]byte("x"), testArtifactMax+1)
	before := f.snapshot()

	for _, tc := range []struct {
		name, path, token string
		body              []byte
		chunked           bool
		ct                string
		status            int
		code              fleet.Code
		field             string
	}{
		{name: "over the limit", path: held + "?name=big.bin&leaseEpoch=" + epoch, token: w.f1, body: big, status: 413, code: fleet.CodeTooLarge, field: "body"},
		{name: "stale epoch", path: held + "?name=output.log&leaseEpoch=" + stale, token: w.f1, body: []byte("late"), status: 409, code: fleet.CodeFenced},
		{name: "chunked", path: held + "?name=output.log&leaseEpoch=" + epoch, token: w.f1, body: []byte("no length"), chunked: true,
			status: 400, code: fleet.CodeInvalid, field: "Content-Length"},
		{name: "no name", path: held + "?leaseEpoch=" + epoch, token: w.f1, body: []byte("x"), status: 400, code: fleet.CodeInvalid, field: "name"},
		{name: "path as name", path: held + "?name=..%2Fx&leaseEpoch=" + epoch, token: w.f1, body: []byte("x"), status: 400, code: fleet.CodeInvalid, field: "name"},
		{name: "unknown kind", path: held + "?name=x&kind=core&leaseEpoch=" + epoch, token: w.f1, body: []byte("x"), status: 400, code: fleet.CodeInvalid, field: "kind"},
		{name: "holder without epoch", path: held + "?name=x", token: w.f1, body: []byte("x"), status: 400, code: fleet.CodeInvalid, field: "leaseEpoch"},
		{name: "epoch not a number", path: held + "?name=x&leaseEpoch=one", token: w.f1, body: []byte("x"), status: 400, code: fleet.CodeInvalid, field: "leaseEpoch"},
		{name: "operator with epoch", path: held + "?name=x&leaseEpoch=" + epoch, token: rootToken, body: []byte("x"), status: 400, code: fleet.CodeInvalid, field: "leaseEpoch"},
		{name: "malformed content type", path: held + "?name=x", token: rootToken, body: []byte("x"), ct: "text/", status: 400, code: fleet.CodeInvalid, field: "Content-Type"},
		{name: "unknown parameter", path: held + "?name=x&size=1", token: rootToken, body: []byte("x"), status: 400, code: fleet.CodeInvalid, field: "size"},
		{name: "unknown job", path: "/api/fleet/jobs/jnope/artifacts?name=x", token: rootToken, body: []byte("x"), status: 404, code: fleet.CodeNotFound},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var rd io.Reader = bytes.NewReader(tc.body)
			if tc.chunked {
				rd = io.MultiReader(rd) // hides the length: net/http sends it chunked
			}
			req, err := http.NewRequest("POST", f.url+tc.path, rd)
			require.NoError(t, err)
			req.Header.Set("Authorization", "Bearer "+tc.token)
			req.Header.Set("X-Product-Id", "p1")
			if tc.ct != "" {
				req.Header.Set("Content-Type", tc.ct)
			}
			resp, err := http.DefaultClient.Do(req)
			require.NoError(t, err)
			defer resp.Body.Close()
			out, err := io.ReadAll(resp.Body)
			require.NoError(t, err)
			res := result{status: resp.StatusCode, header: resp.Header, body: out}
			require.Equal(t, tc.status, res.status, "%s", res)
			e := res.errorOf(t)
			require.Equal(t, tc.code, e.Code, "%s", res)
			require.Equal(t, tc.field, e.Field, "%s", res)
		})
	}
	require.Equal(t, before, f.snapshot(), "a refused upload stored something")
}

// TestArtifactIdenticalBytesStoredOnce: two uploads of the same bytes make
// two pointers and one blob; the blob goes with the last pointer.
func TestArtifactIdenticalBytesStoredOnce(t *testing.T) {
	t.Parallel()
	w := newAuthzWorld(t)
	f := w.f
	blobs := func() int { return len(f.snapshot()["blobs"]) }
	n0 := blobs()
	var a1, a2 fleet.Artifact
	f.ok(http.StatusCreated, &a1, "POST", "/api/fleet/jobs/"+w.held+"/artifacts?name=a.diff&kind=diff", rootToken, "same bytes")
	f.ok(http.StatusCreated, &a2, "POST", "/api/fleet/jobs/"+w.queued+"/artifacts?name=b.diff&kind=diff", rootToken, "same bytes")
	require.Equal(t, a1.SHA256, a2.SHA256)
	require.Equal(t, n0+1, blobs())
	f.ok(http.StatusNoContent, nil, "DELETE", "/api/fleet/artifacts/"+a1.ID, rootToken, nil)
	require.Equal(t, n0+1, blobs())
	res := f.ok(http.StatusOK, nil, "GET", "/api/fleet/artifacts/"+a2.ID+"/content", rootToken, nil)
	require.Equal(t, "same bytes", string(res.body))
	f.ok(http.StatusNoContent, nil, "DELETE", "/api/fleet/artifacts/"+a2.ID, rootToken, nil)
	require.Equal(t, n0, blobs())
}
