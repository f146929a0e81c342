package azblob

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"net/http"
	"os"
	"testing"

	fleetblob "github.com/gigafactory/fleet/shared/blob"
	"github.com/gigafactory/fleet/shared/store"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/stretchr/testify/require"

	"github.com/gigafactory/fleet/shared/blob/blobtest"
)

// TestConformance runs the suite against Azurite (tests/azurite starts it
// under `make test`), each subtest in a container of its own. Multi-megabyte
// uploads go through the block path.
func TestConformance(t *testing.T) {
	runConformance(t, 1<<20)
}

// TestConformanceBlockPath runs the suite again with every non-trivial
// upload sent as blocks and a Put Block List, whose If-None-Match the
// identical-commit and racing-delete cases then exercise.
func TestConformanceBlockPath(t *testing.T) {
	runConformance(t, 16)
}

func runConformance(t *testing.T, singleUploadMax int64) {
	url := blobtest.Azurite(t)
	blobtest.Run(t, func(t *testing.T) blobtest.Backend {
		spool := t.TempDir()
		var b [6]byte
		_, _ = rand.Read(b[:])
		s, err := New(t.Context(), Config{ServiceURL: url, Emulator: true, Container: "t" + hex.EncodeToString(b[:]),
			SpoolDir: spool, SingleUploadMax: singleUploadMax, BlockSize: 1 << 20})
		require.NoError(t, err)
		t.Cleanup(func() { _, _ = s.c.Delete(context.Background(), nil) })
		return blobtest.Backend{Store: s, Staged: func() int {
			entries, err := os.ReadDir(spool)
			require.NoError(t, err)
			return len(entries)
		}}
	})
}

func TestNewValidatesConfig(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	_, err := New(ctx, Config{})
	require.ErrorContains(t, err, "no service URL")
	_, err = New(ctx, Config{ServiceURL: "http://acct.blob.core.windows.net", Credential: fakeCredential{}})
	require.ErrorContains(t, err, "not https", "a real account is reached over TLS only")

	s, err := New(ctx, Config{ServiceURL: "https://acct.blob.core.windows.net/", Credential: fakeCredential{}})
	require.NoError(t, err, "Azure: no request is made at start (Terraform owns the container)")
	require.Equal(t, "https://acct.blob.core.windows.net/"+DefaultContainer, s.c.URL())
}

// TestCredentialChoice: Entra ID outside the emulator, whatever else is
// set; the shared key only for the emulator's account.
func TestCredentialChoice(t *testing.T) {
	t.Parallel()
	var seen []string
	tr := transportFunc(func(req *http.Request) (*http.Response, error) {
		seen = append(seen, req.Header.Get("Authorization"))
		return &http.Response{StatusCode: http.StatusCreated, Header: http.Header{}, Body: http.NoBody, Request: req}, nil
	})
	_, err := New(t.Context(), Config{Emulator: true, Transport: tr})
	require.NoError(t, err)
	require.Len(t, seen, 1, "the emulator's container is created at start")
	require.Regexp(t, "^SharedKey "+EmulatorAccount+":", seen[0])

	s, err := New(t.Context(), Config{ServiceURL: "https://acct.blob.core.windows.net", Credential: fakeCredential{}, Transport: tr})
	require.NoError(t, err)
	_, _ = s.Stat(t.Context(), fleetblob.Key{Namespace: "p1", SHA256: hex.EncodeToString(make([]byte, 32))})
	require.Equal(t, "Bearer fake-token", seen[len(seen)-1])
}

func TestMapError(t *testing.T) {
	t.Parallel()
	resp := func(status int, code string) error {
		return &azcore.ResponseError{StatusCode: status, ErrorCode: code}
	}
	for _, tc := range []struct {
		name string
		err  error
		want error // nil: neither not-found nor unavailable
	}{
		{"missing blob", resp(404, "BlobNotFound"), fleetblob.ErrNotFound},
		{"HEAD without a body", resp(404, ""), fleetblob.ErrNotFound},
		{"missing container is configuration", resp(404, "ContainerNotFound"), nil},
		{"refused credential", resp(403, "AuthorizationPermissionMismatch"), nil},
		{"throttled", resp(429, ""), store.ErrUnavailable},
		{"server busy", resp(503, "ServerBusy"), store.ErrUnavailable},
		{"network", errors.New("dial tcp: connection refused"), store.ErrUnavailable},
	} {
		got := MapError(tc.err)
		require.ErrorIs(t, got, tc.err, tc.name)
		for _, sentinel := range []error{fleetblob.ErrNotFound, store.ErrUnavailable} {
			require.Equal(t, sentinel == tc.want, errors.Is(got, sentinel), "%s: %v", tc.name, got)
		}
	}
	require.ErrorIs(t, MapError(context.Canceled), context.Canceled)
	require.NotErrorIs(t, MapError(context.Canceled), store.ErrUnavailable)
}

type fakeCredential struct{}

func (fakeCredential) GetToken(context.Context, policy.TokenRequestOptions) (azcore.AccessToken, error) {
	return azcore.AccessToken{Token: "fake-token"}, nil
}

type transportFunc func(*http.Request) (*http.Response, error)

func (f transportFunc) Do(req *http.Request) (*http.Response, error) { return f(req) }
