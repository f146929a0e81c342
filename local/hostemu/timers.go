package hostemu

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/gigafactory/fleet/shared/store"

	"github.com/robfig/cron/v3"

	"github.com/gigafactory/fleet/shared/funchost"
)

// ncrontab parses the host's six-field schedules, seconds first. Not
// robfig's descriptors (@every 10s, @hourly): the host refuses them, and
// the function would fail indexing there.
var ncrontab = cron.NewParser(cron.Second | cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow)

// ParseSchedule validates an NCRONTAB expression, and reads it as NCrontab
// does where robfig/cron differs (bothDays).
func ParseSchedule(expr string) (cron.Schedule, error) {
	// robfig takes a time zone prefix whatever the parser's fields; the
	// host's schedules have none (WEBSITE_TIME_ZONE sets it for the app).
	if strings.HasPrefix(expr, "TZ=") || strings.HasPrefix(expr, "CRON_TZ=") {
		return nil, fmt.Errorf("schedule %q: a time zone prefix is not NCRONTAB (the host takes the app's WEBSITE_TIME_ZONE)", expr)
	}
	parsed, err := ncrontab.Parse(expr)
	if err != nil {
		return nil, fmt.Errorf("schedule %q: %w (want six NCRONTAB fields, seconds first, such as */15 * * * * *)", expr, err)
	}
	s := parsed
	if spec, ok := parsed.(*cron.SpecSchedule); ok && spec.Dom&starBit == 0 && spec.Dow&starBit == 0 {
		s = bothDays{spec}
	}
	// A date that never comes (0 0 0 30 2 *) parses, but has no next
	// occurrence: the zero time, which a timer would take as due at once,
	// over and over.
	if s.Next(time.Now().UTC()).IsZero() {
		return nil, fmt.Errorf("schedule %q never fires", expr)
	}
	return s, nil
}

// starBit is robfig's mark of a field written as * (or ?).
const starBit = 1 << 63

// bothDays is a schedule whose day of month and day of week are both
// restricted, read as NCrontab reads it: a day must match both ("0 0 9
// 1-7 * 1" is the first Monday of each month). robfig/cron, as Vixie cron,
// takes a day that matches either, so its occurrences are a superset: the
// ones on a day that misses one of the two fields are passed over.
type bothDays struct{ *cron.SpecSchedule }

// bothDaysSkips bounds the days passed over, as robfig gives up five
// years on: a schedule with no such day returns the zero time.
const bothDaysSkips = 5 * 366

func (s bothDays) Next(t time.Time) time.Time {
	for range bothDaysSkips {
		t = s.SpecSchedule.Next(t)
		if t.IsZero() || (s.Dom&(1<<uint(t.Day())) != 0 && s.Dow&(1<<uint(t.Weekday())) != 0) {
			return t
		}
		// The rest of this day fails the same field: on to the next (a
		// day whose last second comes twice may give it before t).
		if end := time.Date(t.Year(), t.Month(), t.Day(), 23, 59, 59, 0, t.Location()); end.After(t) {
			t = end
		}
	}
	return time.Time{}
}

// hostClock is the time of what the emulator schedules (timers, and the
// change-feed triggers' lease writes): the wall clock, or a test's.
type hostClock interface {
	Now() time.Time
	After(d time.Duration) <-chan time.Time
}

type wallClock struct{}

func (wallClock) Now() time.Time                         { return time.Now().UTC() }
func (wallClock) After(d time.Duration) <-chan time.Time { return time.After(d) }

// statusStore keeps timer schedule status documents (in the store's lease
// container), as the host keeps them in its storage account.
type statusStore interface {
	Read(ctx context.Context, container, pk, id string) (store.Item, error)
	Upsert(ctx context.Context, container, pk, id string, body []byte) (string, error)
}

// timerStatusDoc is a timer's schedule status as kept in the store.
type timerStatusDoc struct {
	ID       string                  `json:"id"`
	Function string                  `json:"function"`
	Status   funchost.ScheduleStatus `json:"status"`
}

// timerTrigger plays the host's timer listener (TimerListener,
// ScheduleMonitor and TimerSchedule in the timers extension):
//   - with the schedule monitor (useMonitor, turned off for schedules that
//     fire more than once a minute) the status is kept across restarts and
//     handed to each invocation; without it ScheduleStatus is null;
//   - IsPastDue is set only on the start-up run the monitor asks for, when
//     the kept status shows an occurrence missed while the host was down;
//   - after each run the next occurrence is computed from the run's start:
//     when a run overran it, the timer fires once at once, unflagged, and
//     missed occurrences are not caught up one by one.
type timerTrigger struct {
	clock        hostClock
	store        statusStore // nil: the status lives as long as the process
	fn           *Function
	binding      string
	expr         string
	schedule     cron.Schedule
	monitor      bool
	runOnStartup bool
	child        *Child
	client       *http.Client
	log          *slog.Logger
	running      sync.Mutex
	// statusUnread: the kept status could not be read at start, so none is
	// written while this run lasts.
	statusUnread bool
}

// statusReadTries bounds the reads of a timer's kept status at start,
// statusReadRetry apart.
const (
	statusReadTries = 3
	statusReadRetry = 100 * time.Millisecond
)

func newTimerTrigger(fn *Function, trig Binding, get Settings, store statusStore, child *Child, log *slog.Logger) (*timerTrigger, error) {
	expr, err := get.String(trig, "schedule", "")
	if err != nil {
		return nil, fmt.Errorf("function %s: %w", fn.Name, err)
	}
	sched, err := ParseSchedule(expr)
	if err != nil {
		return nil, fmt.Errorf("function %s: %w", fn.Name, err)
	}
	useMonitor, err := get.Bool(trig, "useMonitor", true)
	if err != nil {
		return nil, fmt.Errorf("function %s: %w", fn.Name, err)
	}
	runOnStartup, err := get.Bool(trig, "runOnStartup", false)
	if err != nil {
		return nil, fmt.Errorf("function %s: %w", fn.Name, err)
	}
	return &timerTrigger{clock: wallClock{}, store: store, fn: fn, binding: trig.Name, expr: expr, schedule: sched,
		monitor: useMonitor && !subMinute(sched, time.Now()), runOnStartup: runOnStartup, child: child,
		client: &http.Client{Transport: handlerTransport}, log: log}, nil // New bounds it at functionTimeout
}

// subMinute reports whether the schedule fires more than once in the minute
// after now; the host then turns the schedule monitor off.
func subMinute(s cron.Schedule, now time.Time) bool {
	first := s.Next(now)
	if first.IsZero() {
		return false
	}
	second := s.Next(first)
	return !second.IsZero() && second.Before(now.Add(time.Minute))
}

func (t *timerTrigger) statusID() string { return "hostemu.timer." + t.fn.Name }

func (t *timerTrigger) loadStatus(ctx context.Context) (*funchost.ScheduleStatus, error) {
	if t.store == nil {
		return nil, nil
	}
	it, err := t.store.Read(ctx, store.Leases, t.statusID(), t.statusID())
	if errors.Is(err, store.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var doc timerStatusDoc
	if err := json.Unmarshal(it.Body, &doc); err != nil {
		return nil, fmt.Errorf("decode schedule status: %w", err)
	}
	return &doc.Status, nil
}

func (t *timerTrigger) saveStatus(ctx context.Context, st funchost.ScheduleStatus) {
	if t.store == nil || t.statusUnread {
		return
	}
	body, _ := json.Marshal(timerStatusDoc{ID: t.statusID(), Function: t.fn.Name, Status: st})
	if _, err := t.store.Upsert(ctx, store.Leases, t.statusID(), t.statusID(), body); err != nil && ctx.Err() == nil {
		t.log.Warn("timer: cannot keep the schedule status", "function", t.fn.Name, "err", err)
	}
}

// checkPastDue is the schedule monitor's start-up check: it records a
// first status, or a new one when the schedule changed, and reports whether
// an occurrence was missed since the kept status was written.
func (t *timerTrigger) checkPastDue(ctx context.Context, now time.Time, kept *funchost.ScheduleStatus) bool {
	if kept == nil {
		t.saveStatus(ctx, funchost.ScheduleStatus{Next: t.schedule.Next(now), LastUpdated: now})
		return false
	}
	var expected, updated time.Time
	switch {
	case !kept.Last.IsZero():
		expected, updated = t.schedule.Next(kept.Last), kept.Last
	case !kept.LastUpdated.IsZero():
		expected, updated = t.schedule.Next(kept.LastUpdated), kept.LastUpdated
	default:
		expected, updated = t.schedule.Next(now), now
	}
	if !kept.Next.Equal(expected) {
		// The schedule changed: an occurrence of the new one already past
		// was not missed.
		if now.After(expected) {
			expected, updated = t.schedule.Next(now), now
		}
		*kept = funchost.ScheduleStatus{Next: expected, LastUpdated: updated}
		t.saveStatus(ctx, *kept)
	}
	return now.After(kept.Next)
}

// wait waits d on the trigger's clock, as its schedule does; false when
// ctx ended first.
func (t *timerTrigger) wait(ctx context.Context, d time.Duration) bool {
	select {
	case <-ctx.Done():
		return false
	case <-t.clock.After(d):
		return true
	}
}

// run fires the timer until ctx ends.
func (t *timerTrigger) run(ctx context.Context) {
	now := t.clock.Now()
	var status *funchost.ScheduleStatus
	pastDue := false
	if t.monitor {
		kept, err := t.loadStatus(ctx)
		for try := 1; err != nil && try < statusReadTries && t.wait(ctx, statusReadRetry); try++ {
			kept, err = t.loadStatus(ctx) // a busy store's moment
		}
		if err != nil {
			// Left as it is, now and after each run: a status written over
			// after a read that failed would lose the missed run it
			// records, which the next start then flags.
			t.log.Warn("timer: cannot read the schedule status; running on schedule without keeping one", "function", t.fn.Name, "err", err)
			t.statusUnread = true
		} else {
			pastDue = t.checkPastDue(ctx, now, kept)
			status = kept
		}
	}
	if status == nil {
		status = &funchost.ScheduleStatus{Next: t.schedule.Next(now)}
	}
	// The start-up run, when there is one, is due at once.
	startup := pastDue || t.runOnStartup
	for {
		if !startup && status.Next.IsZero() {
			// ParseSchedule refuses schedules that never fire, but one can
			// still run out of dates.
			t.log.Error("timer stopped: its schedule has no next occurrence", "function", t.fn.Name, "schedule", t.expr)
			return
		}
		var wait time.Duration
		if !startup {
			wait = status.Next.Sub(t.clock.Now())
		}
		select {
		case <-ctx.Done():
			return
		case <-t.clock.After(wait):
		}
		invoked := t.clock.Now()
		info := funchost.TimerInfo{IsPastDue: startup && pastDue}
		info.Schedule.AdjustForDST = true
		if t.monitor {
			held := *status
			info.ScheduleStatus = &held
		}
		_ = t.fire(ctx, info) // logged; the schedule goes on
		if ctx.Err() != nil {
			return
		}
		// A timer that fired a moment early counts from its occurrence, or
		// it would fire for the same one twice.
		from := invoked
		if !startup && status.Next.After(invoked) {
			from = status.Next
		}
		status = &funchost.ScheduleStatus{Last: from, Next: t.schedule.Next(from), LastUpdated: from}
		if t.monitor {
			t.saveStatus(ctx, *status)
		}
		startup = false
	}
}

func (t *timerTrigger) fire(ctx context.Context, info funchost.TimerInfo) error {
	// One run of a timer at a time: a run through the admin API waits for
	// a scheduled one, and the other way round.
	t.running.Lock()
	defer t.running.Unlock()
	addr, err := t.child.Addr(ctx)
	if err != nil {
		t.log.Warn("timer skipped: handler not ready", "function", t.fn.Name, "err", err)
		return err
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
		return err
	}
	t.log.Debug("timer invocation", "function", t.fn.Name, "ms", time.Since(start).Milliseconds(), "logs", res.Logs)
	return nil
}
