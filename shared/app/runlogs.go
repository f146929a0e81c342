package app

import (
	"context"
	"log/slog"
	"path/filepath"

	"github.com/gigafactory/fleet/shared/config"
	"github.com/gigafactory/fleet/shared/runlog"
	runlogfs "github.com/gigafactory/fleet/shared/runlog/fs"
)

// openRunLogs opens the store of the runs' live output beside the
// artifacts: files under the data dir on one machine. Without a data dir
// (a cloud store) and no blob container, there is none and the log routes
// say so.
func openRunLogs(_ context.Context, l config.Lookup, dataDir string, log *slog.Logger) (runlog.Store, error) {
	maxBytes, err := l.Bytes(config.MaxLogBytes)
	if err != nil {
		return nil, err
	}
	limits := runlog.Limits{MaxBytes: maxBytes}
	if dataDir == "" {
		log.Warn("no run-log store: live output routes answer unavailable until " + config.ArtifactsURL + " is set")
		return nil, nil
	}
	return runlogfs.Open(filepath.Join(dataDir, "runlogs"), limits)
}
