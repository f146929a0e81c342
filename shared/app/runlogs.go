package app

import (
	"context"
	"log/slog"
	"path/filepath"

	"github.com/gigafactory/fleet/shared/blob/azblob"
	"github.com/gigafactory/fleet/shared/config"
	"github.com/gigafactory/fleet/shared/runlog"
	runlogazblob "github.com/gigafactory/fleet/shared/runlog/azblob"
	runlogfs "github.com/gigafactory/fleet/shared/runlog/fs"
)

// openRunLogs opens the store of the runs' live output beside the
// artifacts: append blobs under runlog/ in the container FLEET_ARTIFACTS_URL
// names, else files under the data dir. With neither (a cloud store and no
// URL) there is none, and the log routes say so.
func openRunLogs(ctx context.Context, l config.Lookup, dataDir string, log *slog.Logger) (runlog.Store, error) {
	maxBytes, err := l.Bytes(config.MaxLogBytes)
	if err != nil {
		return nil, err
	}
	limits := runlog.Limits{MaxBytes: maxBytes}
	if raw := l.Get(config.ArtifactsURL); raw != "" {
		service, container, err := splitContainerURL(raw)
		if err != nil {
			return nil, err
		}
		c, err := azblob.NewContainerClient(ctx, azblob.Config{ServiceURL: service, Container: container, Emulator: l.Get(config.ArtifactsEmulator) == "1"})
		if err != nil {
			return nil, err
		}
		return runlogazblob.New(c, limits), nil
	}
	if dataDir == "" {
		log.Warn("no run-log store: live output routes answer unavailable until " + config.ArtifactsURL + " is set")
		return nil, nil
	}
	return runlogfs.Open(filepath.Join(dataDir, "runlogs"), limits)
}
