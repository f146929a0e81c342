package syncbuf_test

import (
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gigafactory/fleet/shared/syncbuf"
)

// TestBuffer: writers and a reader at once lose nothing and race on
// nothing (run with -race).
func TestBuffer(t *testing.T) {
	t.Parallel()
	var b syncbuf.Buffer
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 100 {
				n, err := b.Write([]byte("x"))
				require.NoError(t, err)
				require.Equal(t, 1, n)
				_ = b.String()
			}
		})
	}
	wg.Wait()
	require.Equal(t, strings.Repeat("x", 800), b.String())
}
