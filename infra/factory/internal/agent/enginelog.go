package agent

import (
	"os"

	"github.com/gigafactory/fleet/infra/factory/internal/config"
	"github.com/gigafactory/fleet/infra/factory/internal/logcap"
)

// engineLogMax is the cap on a run's engine.log; zero takes the default.
func (a *Agent) engineLogMax() int64 {
	if a.cfg.EngineLogMax > 0 {
		return a.cfg.EngineLogMax
	}
	return config.DefaultEngineLogMax
}

// openLog opens the run's engine.log behind its cap
// (FLEET_ENGINE_LOG_MAX_BYTES), so a runaway engine fills neither the disk
// nor an artifact the coordinator would refuse; the live log ships the
// same file. The returned close closes it.
//
// Passing the cap neither fails nor stops the run: a verbose engine is not
// a broken one, and one that never ends is stopped by its wall budget (and
// a silent one by the idle watchdog) as before. Only the file stops
// growing: every byte still counts as a sign of life and still reaches the
// parser of a structured engine.
func (jb *job) openLog() (func(), error) {
	f, err := os.OpenFile(jb.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	limit := jb.a.engineLogMax()
	jb.logw = logcap.New(f, logcap.Config{Max: limit, Setting: config.EnvEngineLogMax, OnCap: func() {
		jb.log.WarnContext(jb.ctx, "the run's output passed the engine.log cap: its first bytes are kept, and its last ones once it ends",
			"capBytes", limit)
	}})
	return func() {
		if err := f.Close(); err != nil {
			jb.log.WarnContext(jb.ctx, "close the run's log", "err", err)
		}
	}, nil
}

// endLog ends a stretch of the run's output (the engine's, the ship
// hook's): the last bytes the cap held back are written, after a line
// saying how many were left out. The engine's stretch ends before the
// live log's final flush, so the live log has them too.
func (jb *job) endLog(what string) {
	dropped, err := jb.logw.Flush()
	if err != nil {
		jb.log.WarnContext(jb.ctx, "write the end of the run's log", "of", what, "err", err)
	}
	if dropped > 0 {
		jb.log.WarnContext(jb.ctx, "output left out of engine.log", "of", what, "droppedBytes", dropped, "capBytes", jb.a.engineLogMax())
	}
}
