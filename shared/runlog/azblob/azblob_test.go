package azblob

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"testing"

	"github.com/stretchr/testify/require"

	blobazure "github.com/gigafactory/fleet/shared/blob/azblob"
	"github.com/gigafactory/fleet/shared/blob/blobtest"
	"github.com/gigafactory/fleet/shared/runlog"
	"github.com/gigafactory/fleet/shared/runlog/runlogtest"
)

// TestConformance runs the suite against Azurite (tests/azurite starts it
// under `make test`), each subtest in a container of its own.
func TestConformance(t *testing.T) {
	url := blobtest.Azurite(t)
	runlogtest.Run(t, func(t *testing.T, limits runlog.Limits) runlog.Store {
		var b [6]byte
		_, _ = rand.Read(b[:])
		c, err := blobazure.NewContainerClient(t.Context(), blobazure.Config{ServiceURL: url, Emulator: true, Container: "l" + hex.EncodeToString(b[:])})
		require.NoError(t, err)
		t.Cleanup(func() { _, _ = c.Delete(context.Background(), nil) })
		return New(c, limits)
	})
}
