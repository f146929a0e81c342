package tests

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gigafactory/fleet/shared/blob/blobtest"
)

// artifactStacks are the blob stores the stack runs artifacts on: the data
// dir's directory, and Azurite when `make test` started it.
var artifactStacks = []struct {
	name string
	env  func(t *testing.T) []string
}{
	{"fs", func(*testing.T) []string { return nil }},
	{"azurite", func(t *testing.T) []string {
		var b [6]byte
		_, _ = rand.Read(b[:])
		return []string{"FLEET_ARTIFACTS_URL=" + blobtest.Azurite(t) + "/s" + hex.EncodeToString(b[:]), "FLEET_ARTIFACTS_EMULATOR=1"}
	}},
}

// upload posts raw bytes as an artifact, with their length declared.
func upload(t *testing.T, s *Stack, token, job, query string, body []byte, contentType string) Response {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.API+"/jobs/"+job+"/artifacts?"+query, bytes.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", contentType)
	resp, err := client.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return Response{Status: resp.StatusCode, Header: resp.Header, Body: data}
}

// TestArtifactsOnStack: through the host emulator and the handler process,
// binary bytes go up and come back identical (sha256 checked), identical
// uploads share their bytes, over the limit is 413, and a holder with a
// stale epoch stores nothing — on the directory store and on Azurite.
func TestArtifactsOnStack(t *testing.T) {
	t.Parallel()
	for _, st := range artifactStacks {
		t.Run(st.name, func(t *testing.T) {
			t.Parallel()
			env := append([]string{"FLEET_ARTIFACT_MAX_BYTES=65536"}, st.env(t)...)
			s := startStack(t, env...)
			s.Product("demo", "app")
			tok := s.Factory("fa", "demo", 1, []string{"os:linux"}, []string{"app"})
			id := s.Submit("demo", Manifest("Build", "app", "os:linux"))
			claim := s.As(tok, http.MethodPost, "/claim", "", nil)
			require.Equal(t, http.StatusOK, claim.Status, "claim: %s", claim.Body)
			epoch := int64(claim.Map(t)["leaseEpoch"].(float64))

			log := make([]byte, 60000)
			_, _ = rand.Read(log) // every byte value, as a binary log could hold
			sum := sha256.Sum256(log)
			r := upload(t, s, tok, id, "name=output.log&kind=log&leaseEpoch="+strconv.FormatInt(epoch, 10), log, "application/octet-stream")
			require.Equal(t, http.StatusCreated, r.Status, "upload: %s", r.Body)
			a := r.Map(t)
			require.Equal(t, hex.EncodeToString(sum[:]), a["sha256"])
			require.EqualValues(t, len(log), a["size"])
			require.Equal(t, id+":"+strconv.FormatInt(epoch, 10), a["runId"])

			list := s.Op(http.MethodGet, "/jobs/"+id+"/artifacts", "demo", nil)
			require.Equal(t, http.StatusOK, list.Status)
			require.Len(t, list.Map(t)["items"], 1)
			got := s.Op(http.MethodGet, "/artifacts/"+a["id"].(string)+"/content", "demo", nil)
			require.Equal(t, http.StatusOK, got.Status)
			gotSum := sha256.Sum256(got.Body)
			require.Equal(t, a["sha256"], hex.EncodeToString(gotSum[:]), "the bytes came back changed")
			require.Equal(t, `"`+a["sha256"].(string)+`"`, got.Header.Get("ETag"))
			notModified := Call(t, http.MethodGet, s.API+"/artifacts/"+a["id"].(string)+"/content", s.Token, nil, "If-None-Match", got.Header.Get("ETag"))
			require.Equal(t, http.StatusNotModified, notModified.Status)

			before := s.Op(http.MethodGet, "/jobs/"+id+"/events", "demo", nil).Body
			r = upload(t, s, tok, id, "name=big.bin&leaseEpoch="+strconv.FormatInt(epoch, 10), make([]byte, 65537), "application/octet-stream")
			require.Equal(t, http.StatusRequestEntityTooLarge, r.Status, "%s", r.Body)
			require.Equal(t, "too_large", r.Map(t)["error"].(map[string]any)["code"])
			r = upload(t, s, tok, id, "name=late.log&leaseEpoch="+strconv.FormatInt(epoch-1, 10), []byte("stale"), "text/plain")
			require.Equal(t, http.StatusConflict, r.Status, "%s", r.Body)
			require.Equal(t, "fenced", r.Map(t)["error"].(map[string]any)["code"])
			require.Equal(t, before, s.Op(http.MethodGet, "/jobs/"+id+"/events", "demo", nil).Body, "a refused upload left an event")
			require.Len(t, s.Op(http.MethodGet, "/jobs/"+id+"/artifacts", "demo", nil).Map(t)["items"], 1)

			del := s.Op(http.MethodDelete, "/artifacts/"+a["id"].(string), "demo", nil)
			require.Equal(t, http.StatusNoContent, del.Status, "%s", del.Body)
			require.Equal(t, http.StatusNotFound, s.Op(http.MethodGet, "/artifacts/"+a["id"].(string)+"/content", "demo", nil).Status)
		})
	}
}
