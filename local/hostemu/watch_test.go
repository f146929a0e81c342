package hostemu

import (
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestWatchFilesSignalsAtOnce: on Linux a change to a watched file (a
// change of times, as the SQLite store marks a container changed) signals
// without waiting for the next poll, which here would come only after an
// hour; the change-feed wake no longer includes the poll interval
// (issue 25).
func TestWatchFilesSignalsAtOnce(t *testing.T) {
	t.Parallel()
	if runtime.GOOS != "linux" {
		t.Skip("change notification is Linux only; elsewhere WatchFiles polls")
	}
	path := filepath.Join(t.TempDir(), "marker")
	require.NoError(t, os.WriteFile(path, nil, 0o600))
	ch := WatchFiles(t.Context(), time.Hour, path)
	for i := range 3 {
		at := time.Unix(int64(1000+i), 0)
		require.NoError(t, os.Chtimes(path, at, at))
		select {
		case <-ch:
		case <-time.After(10 * time.Second):
			t.Fatalf("change %d not signalled", i)
		}
	}
}
