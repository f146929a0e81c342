package app

import (
	"context"
	"fmt"
	"log/slog"
	"net/url"
	"path/filepath"
	"strings"

	"github.com/gigafactory/fleet/shared/blob"

	"github.com/gigafactory/fleet/shared/blob/azblob"
	blobfs "github.com/gigafactory/fleet/shared/blob/fs"
	"github.com/gigafactory/fleet/shared/config"
)

// openBlobs opens the artifact blob store the settings select: the
// container FLEET_ARTIFACTS_URL names (Azure Blob Storage with the managed
// identity, or Azurite), else a directory under the data dir. With neither
// (a cloud store and no URL) there is none, and artifact routes say so.
func openBlobs(ctx context.Context, l config.Lookup, dataDir string, log *slog.Logger) (blob.Store, func() error, error) {
	if raw := l.Get(config.ArtifactsURL); raw != "" {
		service, container, err := splitContainerURL(raw)
		if err != nil {
			return nil, nil, err
		}
		// ClientID stays empty: DefaultAzureCredential picks the
		// user-assigned identity from AZURE_CLIENT_ID, as Terraform sets.
		s, err := azblob.New(ctx, azblob.Config{ServiceURL: service, Container: container, Emulator: l.Get(config.ArtifactsEmulator) == "1"})
		if err != nil {
			return nil, nil, err
		}
		return s, func() error { return nil }, nil
	}
	if dataDir == "" {
		log.Warn("no blob store: artifact routes answer unavailable until " + config.ArtifactsURL + " is set")
		return nil, func() error { return nil }, nil
	}
	s, err := blobfs.Open(filepath.Join(dataDir, "blobs"))
	if err != nil {
		return nil, nil, err
	}
	return s, s.Close, nil
}

// splitContainerURL splits a container URL into the account's blob
// endpoint and the container: the container is the last path segment.
func splitContainerURL(raw string) (service, container string, err error) {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" || (u.Scheme != "https" && u.Scheme != "http") {
		return "", "", fmt.Errorf("%s=%q: want the container's URL, such as https://<account>.blob.core.windows.net/artifacts", config.ArtifactsURL, raw)
	}
	path := strings.Trim(u.Path, "/")
	i := strings.LastIndex(path, "/")
	container = path[i+1:]
	if container == "" {
		return "", "", fmt.Errorf("%s=%q: the URL names no container", config.ArtifactsURL, raw)
	}
	u.Path = "/" + path[:max(i, 0)]
	u.RawQuery, u.Fragment = "", ""
	return strings.TrimSuffix(u.String(), "/"), container, nil
}
