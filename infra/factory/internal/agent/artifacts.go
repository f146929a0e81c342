package agent

import (
	"context"
	"errors"
	"fmt"
	"mime"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/gigafactory/fleet/infra/factory/internal/config"
	"github.com/gigafactory/fleet/infra/factory/internal/logcap"
	"github.com/gigafactory/fleet/shared/api"
	"github.com/gigafactory/fleet/shared/fleet"
)

// envUsageFile names the engine's usage report, when the factory gives the
// engine one: a file the engine writes and the run uploads as a report.
const envUsageFile = "FLEET_JOB_USAGE_FILE"

// uploadBudget bounds all of a run's artifact uploads together, on the
// factory's clock. An upload has no whole-request timeout (a large file on
// a slow link takes what it takes), so without it a stalled one would use
// up the two minutes the report after it (the failure, the release, the
// acknowledgement) has too, and that report is what frees the lease.
const uploadBudget = time.Minute

// Artifact names of a run.
const (
	artifactLog  = "engine.log"
	artifactDiff = "change.diff"
)

// uploadArtifacts uploads what this run leaves behind — the engine's
// output, the diff from the run's base to its last commit, and the usage
// report when the engine wrote one — under the run's lease epoch, before
// the run hands the job on (the upload is fenced like any holder write).
// Best effort: a lost artifact must not fail a run. A fenced upload stores
// nothing, and the step after it meets the same fence.
//
// An artifact counts as uploaded only once the coordinator stored it: one
// that failed (the job's context ended, the coordinator refused it) is
// tried again by the run's next step that uploads (a step that ends the
// run early: release, acknowledgement, failure report), and none is
// uploaded twice. Every artifact not uploaded is logged, and named in the
// error returned.
func (jb *job) uploadArtifacts(ctx context.Context) error {
	ctx, cancel := jb.a.within(ctx, uploadBudget)
	defer cancel()
	var errs []error
	var stop error // a fence, or the end of ctx: the rest are not tried
	for _, a := range jb.runArtifacts(ctx) {
		if jb.uploaded[a.Name] {
			continue
		}
		err := stop
		if err == nil {
			var got *fleet.Artifact
			got, err = jb.a.api.UploadArtifact(ctx, jb.j.ProductID, jb.j.ID, a)
			if err == nil {
				if jb.uploaded == nil {
					jb.uploaded = map[string]bool{}
				}
				jb.uploaded[a.Name] = true
				jb.log.InfoContext(ctx, "artifact uploaded", "name", a.Name, "artifact", got.ID, "size", got.Size, "sha256", got.SHA256)
				continue
			}
			if errors.Is(err, api.ErrFenced) || ctx.Err() != nil {
				stop = err
			}
		}
		jb.log.WarnContext(ctx, "artifact not uploaded", "name", a.Name, "err", err)
		errs = append(errs, fmt.Errorf("artifact %s not uploaded: %w", a.Name, err))
	}
	return errors.Join(errs...)
}

// runArtifacts lists the files of this run that exist.
func (jb *job) runArtifacts(ctx context.Context) []api.ArtifactUpload {
	var out []api.ArtifactUpload
	file := func(name string, kind fleet.ArtifactKind, contentType, path string) api.ArtifactUpload {
		return api.ArtifactUpload{Name: name, Kind: kind, ContentType: contentType, LeaseEpoch: &jb.cl.LeaseEpoch, Open: api.OpenFile(path)}
	}
	if jb.logPath != "" && exists(jb.logPath) {
		out = append(out, file(artifactLog, fleet.ArtifactLog, "text/plain; charset=utf-8", jb.logPath))
	}
	if jb.dir != "" && exists(jb.eventsPath()) {
		// A structured engine's raw stream, as it printed it.
		out = append(out, file(artifactEvents, fleet.ArtifactLog, "application/x-ndjson", jb.eventsPath()))
	}
	if jb.wt != nil && !jb.uploaded[artifactDiff] {
		path := filepath.Join(jb.dir, artifactDiff)
		if err := jb.writeDiff(ctx, path); err != nil {
			jb.log.WarnContext(ctx, "diff not written", "err", err)
		} else {
			out = append(out, file(artifactDiff, fleet.ArtifactDiff, "text/x-diff", path))
		}
	}
	if path := jb.usageFile(); path != "" && written(path) {
		ct := mime.TypeByExtension(filepath.Ext(path))
		if ct == "" {
			ct = "application/octet-stream"
		}
		out = append(out, file(usageName(path), fleet.ArtifactReport, ct, path))
	}
	return out
}

// writeDiff writes the run's diff to path within the cap of the run's
// output (FLEET_ENGINE_LOG_MAX_BYTES), as engine.log is: a change past it
// (an engine that wrote a huge file) must fill neither the factory's disk
// nor an artifact the coordinator refuses. Past the cap the file keeps the
// diff's first bytes, a line saying how many were left out and its last
// lines; it no longer applies, and the whole change is on the run's
// branch.
func (jb *job) writeDiff(ctx context.Context, path string) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	limit := jb.a.engineLogMax()
	w := logcap.New(f, logcap.Config{Max: limit, Setting: config.EnvEngineLogMax, Name: "this diff"})
	err = jb.wt.DiffTo(ctx, w)
	dropped, ferr := w.Flush()
	if dropped > 0 {
		jb.log.WarnContext(ctx, "the run's diff passed the cap of its file: its first and last bytes are kept",
			"file", artifactDiff, "droppedBytes", dropped, "capBytes", limit)
	}
	return errors.Join(err, ferr, f.Close())
}

// usageFile is the usage report's path as the engine was told it ("" when
// it was not): read from the engine's environment, the one place that
// names it.
func (jb *job) usageFile() string {
	if jb.wt == nil {
		return ""
	}
	path := ""
	// The last entry wins, as for the engine.
	for _, kv := range jb.env(jb.a.cfg.DefaultEngine, filepath.Join(jb.dir, "prompt.md")) {
		if v, ok := strings.CutPrefix(kv, envUsageFile+"="); ok {
			path = v
		}
	}
	return path
}

// usageName is the artifact name of the usage report: its file name when
// that is a plain name, else usage.
func usageName(path string) string {
	if name := filepath.Base(path); fleet.ValidateName("name", name) == nil {
		return name
	}
	return "usage"
}

func exists(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.Mode().IsRegular()
}

// written reports a regular file with something in it: the factory creates
// the usage file empty for the engine, so an empty one was never written.
func written(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.Mode().IsRegular() && fi.Size() > 0
}
