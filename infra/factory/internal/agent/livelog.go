package agent

import (
	"context"
	"time"

	"github.com/gigafactory/fleet/infra/factory/internal/logship"
)

// shipFlushTimeout bounds sending the rest of the log when the engine ends.
const shipFlushTimeout = 15 * time.Second

// shipLog streams the run's log file to the coordinator while the engine
// runs (API.md "Live output"). The returned stop sends the rest; it must
// run before the run ends, since the fence then refuses the log. The file
// only grows by appends, within its cap (openCapped), so the live log is
// the file: no more than it holds. An API without AppendLog (a test's
// fake) ships nothing.
func (jb *job) shipLog() (stop func()) {
	send, ok := jb.a.api.(logship.Appender)
	if !ok {
		return func() {}
	}
	s := logship.New(logship.Config{Path: jb.logPath, Product: jb.j.ProductID, JobID: jb.j.ID, Epoch: jb.cl.LeaseEpoch,
		Send: send, Log: jb.log})
	s.Start(jb.ctx)
	return func() {
		// Bounded: a coordinator out of reach must not hold the run's end.
		ctx, cancel := context.WithTimeout(context.WithoutCancel(jb.ctx), shipFlushTimeout)
		defer cancel()
		s.Stop(ctx)
	}
}
