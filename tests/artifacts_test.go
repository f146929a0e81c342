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

// TestFactoryUploadsRunArtifacts: a real factory process uploads the
// engine's output and the diff of every run, each under its own run: the
// first run fails, the operator requeues, the second ships.
func TestFactoryUploadsRunArtifacts(t *testing.T) {
	t.Parallel()
	s := startStack(t)
	repo := newFacRepo(t, "app")
	s.Product("demo", "app")
	eng := facEngine(t, `echo "run $FLEET_JOB_LEASE_EPOCH of $FLEET_JOB_ID says hello"
echo "epoch $FLEET_JOB_LEASE_EPOCH" > "made-$FLEET_JOB_LEASE_EPOCH.txt"
if [ "$FLEET_JOB_LEASE_EPOCH" = 1 ]; then echo "giving up" >&2; exit 3; fi`)
	startFactory(t, s, "fa", "demo", 1, repo, eng)

	id := s.Submit("demo", Manifest("Twice", "app", "engine:fake"))
	facWaitStage(t, s, "demo", id, "failed", 60*time.Second)
	r := s.Op(http.MethodPost, "/jobs/"+id+"/actions/requeue", "demo", map[string]any{"reason": "again"})
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	job := facWaitStage(t, s, "demo", id, "shipped", 60*time.Second)
	second := int64(job["leaseEpoch"].(float64))

	list := s.Op(http.MethodGet, "/jobs/"+id+"/artifacts", "demo", nil)
	require.Equal(t, http.StatusOK, list.Status)
	var page struct {
		Items []struct {
			ID, RunID, Name, Kind, SHA256 string
			Size                          int64
		} `json:"items"`
	}
	list.JSON(t, &page)
	got := map[string]string{}
	for _, a := range page.Items {
		content := s.Op(http.MethodGet, "/artifacts/"+a.ID+"/content", "demo", nil)
		require.Equal(t, http.StatusOK, content.Status)
		sum := sha256.Sum256(content.Body)
		require.Equal(t, a.SHA256, hex.EncodeToString(sum[:]), a.Name)
		got[a.RunID+" "+a.Name] = string(content.Body)
	}
	run1, run2 := id+":1", id+":"+strconv.FormatInt(second, 10)
	require.Len(t, got, 4, "a log and a diff per run: %v", keys(got))
	require.Contains(t, got[run1+" engine.log"], "run 1 of "+id+" says hello")
	require.Contains(t, got[run1+" engine.log"], "giving up")
	require.Contains(t, got[run1+" change.diff"], "+epoch 1")
	require.Contains(t, got[run2+" engine.log"], "run "+strconv.FormatInt(second, 10)+" of "+id+" says hello")
	require.Contains(t, got[run2+" change.diff"], "made-"+strconv.FormatInt(second, 10)+".txt")
}

func keys(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}
