package agent

import (
	"errors"
	"os"

	"github.com/gigafactory/fleet/infra/factory/internal/config"
	"github.com/gigafactory/fleet/infra/factory/internal/logcap"
)

// engineLogMax is the cap on each file of a run's output; zero takes the
// default.
func (a *Agent) engineLogMax() int64 {
	if a.cfg.EngineLogMax > 0 {
		return a.cfg.EngineLogMax
	}
	return config.DefaultEngineLogMax
}

// cappedFile is a file of the run's output (engine.log, a structured
// engine's engine-events.jsonl) written behind the cap.
type cappedFile struct {
	*logcap.Writer
	name string
	f    *os.File
}

// openCapped opens a file of the run's output behind its cap
// (FLEET_ENGINE_LOG_MAX_BYTES), so a runaway engine fills neither the disk
// nor an artifact the coordinator would refuse; the live log ships
// engine.log as it is.
//
// Passing the cap neither fails nor stops the run: a verbose engine is not
// a broken one, and one that never ends is stopped by its wall budget (and
// a silent one by the idle watchdog) as before. Only the file stops
// growing: every byte still counts as a sign of life and still reaches the
// parser of a structured engine.
func (jb *job) openCapped(path, name string) (*cappedFile, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	limit := jb.a.engineLogMax()
	w := logcap.New(f, logcap.Config{Max: limit, Setting: config.EnvEngineLogMax, OnCap: func() {
		jb.log.WarnContext(jb.ctx, "the run's output passed the cap of its file: its first bytes are kept, and its last ones once it ends",
			"file", name, "capBytes", limit)
	}})
	return &cappedFile{Writer: w, name: name, f: f}, nil
}

// endOutput ends a stretch of the run's output (the engine's, the ship
// hook's): the last bytes each file's cap held back are written, after a
// line saying how many were left out. The engine's stretch ends before
// the live log's final flush, so the live log has them too.
func (jb *job) endOutput(what string) {
	for _, c := range []*cappedFile{jb.logw, jb.eventsw} {
		if c == nil {
			continue
		}
		dropped, err := c.Flush()
		if err != nil {
			jb.log.WarnContext(jb.ctx, "write the end of the run's output", "of", what, "file", c.name, "err", err)
		}
		if dropped > 0 {
			jb.log.WarnContext(jb.ctx, "output left out of its file", "of", what, "file", c.name, "droppedBytes", dropped,
				"capBytes", jb.a.engineLogMax())
		}
	}
}

// closeOutput closes the files of the run's output.
func (jb *job) closeOutput() {
	var errs []error
	for _, c := range []*cappedFile{jb.logw, jb.eventsw} {
		if c != nil {
			errs = append(errs, c.f.Close())
		}
	}
	if err := errors.Join(errs...); err != nil {
		jb.log.WarnContext(jb.ctx, "close the run's output", "err", err)
	}
}
