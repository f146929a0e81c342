package hostemu

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/robfig/cron/v3"

	"github.com/gigafactory/fleet/shared/funchost"
)

// ncrontab parses the host's six-field schedules, seconds first.
var ncrontab = cron.NewParser(cron.Second | cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// ParseSchedule validates an NCRONTAB expression.
func ParseSchedule(expr string) (cron.Schedule, error) {
	s, err := ncrontab.Parse(expr)
	if err != nil {
		return nil, fmt.Errorf("schedule %q: %w (want six NCRONTAB fields, seconds first, such as */15 * * * * *)", expr, err)
	}
	// A date that never comes (0 0 0 30 2 *) parses, but has no next
	// occurrence: the zero time, which a timer would take as due at once,
	// over and over.
	if s.Next(time.Now()).IsZero() {
		return nil, fmt.Errorf("schedule %q never fires", expr)
	}
	return s, nil
}

// pastDueSlack is how late an occurrence may fire and still be on time.
const pastDueSlack = time.Second

type timerTrigger struct {
	fn       *Function
	binding  string
	expr     string
	schedule cron.Schedule
	child    *Child
	client   *http.Client
	log      *slog.Logger
}

func newTimerTrigger(fn *Function, trig Binding, get Settings, child *Child, log *slog.Logger) (*timerTrigger, error) {
	expr, err := get.String(trig, "schedule", "")
	if err != nil {
		return nil, fmt.Errorf("function %s: %w", fn.Name, err)
	}
	sched, err := ParseSchedule(expr)
	if err != nil {
		return nil, fmt.Errorf("function %s: %w", fn.Name, err)
	}
	return &timerTrigger{fn: fn, binding: trig.Name, expr: expr, schedule: sched, child: child,
		client: &http.Client{Timeout: 10 * time.Minute, Transport: handlerTransport}, log: log}, nil
}

// run fires the timer until ctx ends. Occurrences never overlap: those that
// come due while a run is still going fold into one catch-up run, made as
// soon as it ends and flagged past due, as the host's schedule monitor does.
func (t *timerTrigger) run(ctx context.Context) {
	last := time.Time{}
	next, missed := t.schedule.Next(time.Now()), false
	for {
		if next.IsZero() {
			// ParseSchedule refuses schedules that never fire, but one can
			// still run out of dates; the zero time would be due at once,
			// forever.
			t.log.Error("timer stopped: its schedule has no next occurrence", "function", t.fn.Name, "schedule", t.expr)
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Until(next)):
		}
		now := time.Now()
		status := &funchost.ScheduleStatus{Last: last, Next: t.schedule.Next(now), LastUpdated: now}
		info := funchost.TimerInfo{ScheduleStatus: status, IsPastDue: missed || now.Sub(next) > pastDueSlack}
		info.Schedule.AdjustForDST = true
		t.fire(ctx, info)
		last = next
		next, missed = t.afterRun(last, time.Now())
	}
}

// afterRun picks the occurrence to wait for once the run for last ended at
// end: the one after last, or, when the run overran later occurrences, the
// latest of those (missed is then true), due at once. Scheduling from end
// instead would skip the missed occurrences without a trace. next is the
// zero time when the schedule has no occurrence left.
func (t *timerTrigger) afterRun(last, end time.Time) (next time.Time, missed bool) {
	next = t.schedule.Next(last)
	for !next.IsZero() && !next.After(end) {
		missed = true
		following := t.schedule.Next(next)
		if following.IsZero() || following.After(end) {
			break
		}
		next = following
	}
	return next, missed
}

func (t *timerTrigger) fire(ctx context.Context, info funchost.TimerInfo) {
	addr, err := t.child.Addr(ctx)
	if err != nil {
		t.log.Warn("timer skipped: handler not ready", "function", t.fn.Name, "err", err)
		return
	}
	payload, _ := json.Marshal(info)
	inv := funchost.Invocation{
		Data:     map[string]json.RawMessage{t.binding: payload},
		Metadata: map[string]json.RawMessage{},
	}
	start := time.Now()
	res, _, err := invoke(ctx, t.client, addr, t.fn.Name, &inv)
	if err != nil {
		if ctx.Err() == nil {
			t.log.Error("timer invocation failed", "function", t.fn.Name, "err", err)
		}
		return
	}
	t.log.Debug("timer invocation", "function", t.fn.Name, "ms", time.Since(start).Milliseconds(), "logs", res.Logs)
}
