package hostemu

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gigafactory/fleet/shared/store"

	"github.com/stretchr/testify/require"

	"github.com/gigafactory/fleet/shared/config"
	"github.com/gigafactory/fleet/shared/funchost"
	"github.com/gigafactory/fleet/shared/store/sqlite"
)

// timerEvent is what a timer under test did next: wait, or invoke.
type timerEvent struct {
	wait time.Duration       // set when the timer started waiting
	info *funchost.TimerInfo // set when the function was invoked
	at   time.Time           // the clock at the event
}

// fakeClock is a manual clock; every wait is reported as an event.
type fakeClock struct {
	mu      sync.Mutex
	now     time.Time
	waiters []fakeWaiter
	events  chan timerEvent
}

type fakeWaiter struct {
	at time.Time
	ch chan time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) After(d time.Duration) <-chan time.Time {
	c.mu.Lock()
	ch := make(chan time.Time, 1)
	now := c.now
	if d <= 0 {
		ch <- now
	} else {
		c.waiters = append(c.waiters, fakeWaiter{at: now.Add(d), ch: ch})
	}
	c.mu.Unlock()
	c.events <- timerEvent{wait: d, at: now}
	return ch
}

// Set moves the clock to t and releases the waits due by then.
func (c *fakeClock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = t
	kept := c.waiters[:0]
	for _, w := range c.waiters {
		if w.at.After(t) {
			kept = append(kept, w)
			continue
		}
		w.ch <- t
	}
	c.waiters = kept
}

// memStatus is an in-memory statusStore.
type memStatus struct {
	mu   sync.Mutex
	docs map[string][]byte
}

func (m *memStatus) Read(_ context.Context, container, _, id string) (store.Item, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	b, ok := m.docs[container+"/"+id]
	if !ok {
		return store.Item{}, store.ErrNotFound
	}
	return store.Item{Body: b}, nil
}

func (m *memStatus) Upsert(_ context.Context, container, _, id string, body []byte) (string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.docs == nil {
		m.docs = map[string][]byte{}
	}
	m.docs[container+"/"+id] = body
	return "1", nil
}

// flakyStatus is a status store whose first fails reads fail, as a busy
// store's can.
type flakyStatus struct {
	*memStatus
	fails int32
	reads atomic.Int32
}

func (f *flakyStatus) Read(ctx context.Context, container, pk, id string) (store.Item, error) {
	if f.reads.Add(1) <= f.fails {
		return store.Item{}, errors.New("database is locked")
	}
	return f.memStatus.Read(ctx, container, pk, id)
}

// timerRun is a timer trigger on a fake clock in front of a fake handler.
type timerRun struct {
	t     *testing.T
	clock *fakeClock
}

// startTimer runs the timer function with the given schedule and extra
// timerTrigger properties from now on, with its status in store.
func startTimer(t *testing.T, schedule, extra string, now time.Time, store statusStore, during func(clock *fakeClock, n int)) *timerRun {
	t.Helper()
	props := `{"schedule":"` + schedule + `"` + extra + `}`
	var p map[string]json.RawMessage
	require.NoError(t, json.Unmarshal([]byte(props), &p))
	fn := &Function{Name: "sweep", Bindings: []Binding{{Type: "timerTrigger", Direction: "in", Name: "timer", Props: p}}}
	trig, _ := fn.Trigger()
	tt, err := newTimerTrigger(fn, trig, Settings(func(string) string { return "" }), store, nil, slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	return runTrigger(t, tt, now, during)
}

// runTrigger runs tt on a fake clock from now on, in front of a fake
// handler serving its function.
func runTrigger(t *testing.T, tt *timerTrigger, now time.Time, during func(clock *fakeClock, n int)) *timerRun {
	t.Helper()
	clock := &fakeClock{now: now, events: make(chan timerEvent, 16)}
	r := &timerRun{t: t, clock: clock}
	var mu sync.Mutex
	calls := 0
	handler := funchost.NewServer(nil, "", nil)
	handler.Handle(tt.fn.Name, func(_ context.Context, inv *funchost.Invocation) (*funchost.Result, error) {
		info, err := funchost.Timer(inv.Data[tt.binding])
		if err != nil {
			return nil, err
		}
		clock.events <- timerEvent{info: info, at: clock.Now()}
		mu.Lock()
		calls++
		n := calls
		mu.Unlock()
		if during != nil {
			during(clock, n)
		}
		return &funchost.Result{}, nil
	})
	tt.clock, tt.child = clock, readyChild(newTestServer(t, handler))
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { defer close(done); tt.run(ctx) }()
	t.Cleanup(func() {
		cancel()
		// Release a wait in progress; drain what the timer still reports.
		go func() {
			for range clock.events {
			}
		}()
		<-done
	})
	return r
}

// next returns the timer's next event.
func (r *timerRun) next() timerEvent {
	r.t.Helper()
	select {
	case ev := <-r.clock.events:
		return ev
	case <-time.After(10 * time.Second):
		r.t.Fatal("the timer neither waited nor fired")
		return timerEvent{}
	}
}

// fire expects the timer to invoke the function now, without waiting.
func (r *timerRun) fire() *funchost.TimerInfo {
	r.t.Helper()
	ev := r.next()
	for ev.info == nil && ev.wait <= 0 { // a wait for no time is none
		ev = r.next()
	}
	require.NotNil(r.t, ev.info, "want an invocation now, the timer waits %s instead", ev.wait)
	return ev.info
}

// waitOut expects the timer to wait exactly d and lets the time pass.
func (r *timerRun) waitOut(d time.Duration) {
	r.t.Helper()
	ev := r.next()
	require.Nil(r.t, ev.info, "want a wait of %s, the timer fired instead", d)
	require.Equal(r.t, d, ev.wait)
	r.clock.Set(ev.at.Add(d))
}

// waitThenFire expects the timer to wait exactly d, lets the time pass, and
// expects the invocation.
func (r *timerRun) waitThenFire(d time.Duration) *funchost.TimerInfo {
	r.t.Helper()
	ev := r.next()
	require.Nil(r.t, ev.info, "want a wait of %s, the timer fired instead (IsPastDue %v)", d, ev.info != nil && ev.info.IsPastDue)
	require.Equal(r.t, d, ev.wait)
	r.clock.Set(ev.at.Add(d))
	return r.fire()
}

var noon = time.Date(2026, 11, 23, 12, 0, 30, 0, time.UTC)

func at(hms string) time.Time {
	t, err := time.Parse(time.DateOnly+" 15:04:05", "2026-11-23 "+hms)
	if err != nil {
		panic(err)
	}
	return t
}

// TestTimerScheduleStatus: the host keeps a schedule status (and hands it
// over) only for timers that use the monitor and fire at most once a
// minute; for faster schedules it turns the monitor off, and
// ScheduleStatus is null.
func TestTimerScheduleStatus(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		schedule string
		extra    string
		wait     time.Duration
		period   time.Duration
		status   bool
	}{
		{name: "every 15 s: no monitor", schedule: "*/15 * * * * *", wait: 15 * time.Second, period: 15 * time.Second},
		{name: "every 30 s: no monitor", schedule: "*/30 * * * * *", wait: 30 * time.Second, period: 30 * time.Second},
		{name: "every minute, useMonitor off", schedule: "0 * * * * *", extra: `,"useMonitor":false`, wait: 30 * time.Second, period: time.Minute},
		{name: "every minute", schedule: "0 * * * * *", wait: 30 * time.Second, period: time.Minute, status: true},
		{name: "hourly", schedule: "0 0 * * * *", wait: 59*time.Minute + 30*time.Second, period: time.Hour, status: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := startTimer(t, tc.schedule, tc.extra, noon, &memStatus{}, nil)
			first := r.waitThenFire(tc.wait)
			second := r.waitThenFire(tc.period)
			require.False(t, first.IsPastDue)
			require.False(t, second.IsPastDue)
			if !tc.status {
				require.Nil(t, first.ScheduleStatus)
				require.Nil(t, second.ScheduleStatus)
				return
			}
			// What the listener held when it fired: a first run has no
			// last occurrence; Next is the occurrence being run.
			firstAt := noon.Add(tc.wait)
			require.NotNil(t, first.ScheduleStatus)
			require.True(t, first.ScheduleStatus.Last.IsZero())
			require.True(t, first.ScheduleStatus.LastUpdated.IsZero())
			require.Equal(t, firstAt, first.ScheduleStatus.Next)
			require.NotNil(t, second.ScheduleStatus)
			require.Equal(t, funchost.ScheduleStatus{Last: firstAt, Next: firstAt.Add(tc.period), LastUpdated: firstAt}, *second.ScheduleStatus)
		})
	}
}

// TestTimerOverrunIsNotPastDue: a run that overran later occurrences is not
// caught up occurrence by occurrence and is never flagged past due. The
// host computes the next occurrence from the overrunning run's start; that
// one being past, it fires once at once, unflagged, then keeps the
// schedule (TimerListener.InvokeJobFunction, GetNextTimerInterval).
func TestTimerOverrunIsNotPastDue(t *testing.T) {
	t.Parallel()
	r := startTimer(t, "0 * * * * *", "", noon, &memStatus{}, func(clock *fakeClock, n int) {
		if n == 1 {
			clock.Set(at("12:03:30")) // the first run takes 2.5 minutes
		}
	})
	first := r.waitThenFire(30 * time.Second)
	require.False(t, first.IsPastDue)
	second := r.fire()
	require.False(t, second.IsPastDue, "only a start-up run is past due")
	require.Equal(t, funchost.ScheduleStatus{Last: at("12:01:00"), Next: at("12:02:00"), LastUpdated: at("12:01:00")}, *second.ScheduleStatus)
	third := r.waitThenFire(30 * time.Second)
	require.False(t, third.IsPastDue)
	require.Equal(t, funchost.ScheduleStatus{Last: at("12:03:30"), Next: at("12:04:00"), LastUpdated: at("12:03:30")}, *third.ScheduleStatus)
}

// TestTimerStatusKeptWhenItsReadFails: a timer whose kept status cannot
// be read at start-up (the host's storage busy a moment) reads it again;
// when it still cannot, it runs on schedule and writes no status, neither
// at start nor after a run: written over, the occurrence it shows missed
// would be lost. A later start reads it and runs that occurrence past due.
func TestTimerStatusKeptWhenItsReadFails(t *testing.T) {
	t.Parallel()
	kept := funchost.ScheduleStatus{Last: at("11:59:00"), Next: at("12:00:00"), LastUpdated: at("11:59:00")}
	stored := func(t *testing.T) *memStatus {
		mem := &memStatus{}
		b, err := json.Marshal(timerStatusDoc{ID: "hostemu.timer.sweep", Function: "sweep", Status: kept})
		require.NoError(t, err)
		_, err = mem.Upsert(t.Context(), store.Leases, "hostemu.timer.sweep", "hostemu.timer.sweep", b)
		require.NoError(t, err)
		return mem
	}
	keptOf := func(t *testing.T, mem *memStatus) funchost.ScheduleStatus {
		it, err := mem.Read(t.Context(), store.Leases, "hostemu.timer.sweep", "hostemu.timer.sweep")
		require.NoError(t, err)
		var doc timerStatusDoc
		require.NoError(t, json.Unmarshal(it.Body, &doc))
		return doc.Status
	}

	t.Run("a read that fails once is tried again", func(t *testing.T) {
		t.Parallel()
		r := startTimer(t, "0 * * * * *", "", at("12:05:30"), &flakyStatus{memStatus: stored(t), fails: 1}, nil)
		r.waitOut(statusReadRetry) // on the trigger's clock
		require.True(t, r.fire().IsPastDue)
	})
	t.Run("reads that keep failing", func(t *testing.T) {
		t.Parallel()
		mem := stored(t)
		r := startTimer(t, "0 * * * * *", "", at("12:05:30"), &flakyStatus{memStatus: mem, fails: statusReadTries}, nil)
		for range statusReadTries - 1 {
			r.waitOut(statusReadRetry)
		}
		// 12:06:00 comes the retries' wait later than at the start.
		info := r.waitThenFire(30*time.Second - (statusReadTries-1)*statusReadRetry)
		require.False(t, info.IsPastDue, "not known to be past due: the status was not read")
		require.Equal(t, 60*time.Second, r.next().wait, "on schedule")
		require.Equal(t, kept, keptOf(t, mem), "the kept status is not written over, at start or after a run")

		later := startTimer(t, "0 * * * * *", "", at("12:07:40"), mem, nil)
		require.True(t, later.fire().IsPastDue, "the missed occurrence runs at the next start")
	})
}

// TestTimerPastDueOnlyAtStartup: the host flags a run past due only when
// it starts and the schedule status it kept shows an occurrence missed
// while it was down; it runs that one at once.
func TestTimerPastDueOnlyAtStartup(t *testing.T) {
	t.Parallel()
	status := func(last, next, updated string) *funchost.ScheduleStatus {
		s := &funchost.ScheduleStatus{Next: at(next)}
		if last != "" {
			s.Last = at(last)
		}
		if updated != "" {
			s.LastUpdated = at(updated)
		}
		return s
	}
	tests := []struct {
		name    string
		stored  *funchost.ScheduleStatus
		extra   string
		start   time.Time
		pastDue bool
		now     bool          // the first run is made at once
		wait    time.Duration // else after this wait
	}{
		{name: "first start", start: at("12:05:30"), wait: 30 * time.Second},
		{name: "down over an occurrence", stored: status("11:59:00", "12:00:00", "11:59:00"), start: at("12:05:30"), pastDue: true, now: true},
		{name: "down over an occurrence, never ran", stored: status("", "12:00:00", "11:59:10"), start: at("12:05:30"), pastDue: true, now: true},
		{name: "restart between occurrences", stored: status("12:05:00", "12:06:00", "12:05:00"), start: at("12:05:30"), wait: 30 * time.Second},
		{name: "schedule changed while down", stored: status("11:59:00", "12:10:00", "11:59:00"), start: at("12:05:30"), wait: 30 * time.Second},
		{name: "run on startup", extra: `,"runOnStartup":true`, start: at("12:05:30"), now: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			st := &memStatus{}
			if tc.stored != nil {
				b, err := json.Marshal(timerStatusDoc{ID: "hostemu.timer.sweep", Function: "sweep", Status: *tc.stored})
				require.NoError(t, err)
				_, err = st.Upsert(t.Context(), store.Leases, "hostemu.timer.sweep", "hostemu.timer.sweep", b)
				require.NoError(t, err)
			}
			r := startTimer(t, "0 * * * * *", tc.extra, tc.start, st, nil)
			var first *funchost.TimerInfo
			if tc.now {
				first = r.fire()
			} else {
				first = r.waitThenFire(tc.wait)
			}
			require.Equal(t, tc.pastDue, first.IsPastDue)
			if tc.pastDue {
				require.Equal(t, tc.stored, first.ScheduleStatus, "a past-due run gets the status kept before the host went down")
			}
			// From then on, on schedule and never past due.
			next := r.clock.Now().Truncate(time.Minute).Add(time.Minute)
			later := r.waitThenFire(next.Sub(r.clock.Now()))
			require.False(t, later.IsPastDue)

			// The status is kept (before the timer waits again), so the next
			// start knows what ran.
			require.Equal(t, next.Add(time.Minute).Sub(next), r.next().wait)
			it, err := st.Read(t.Context(), store.Leases, "hostemu.timer.sweep", "hostemu.timer.sweep")
			require.NoError(t, err)
			var doc timerStatusDoc
			require.NoError(t, json.Unmarshal(it.Body, &doc))
			require.Equal(t, next, doc.Status.Last)
			require.Equal(t, next.Add(time.Minute), doc.Status.Next)
		})
	}
}

// TestShippedTimersRunOnTheirSchedules: the emulator, on the repository's
// function.json files and the settings' defaults, runs every timer of the
// app on the schedule its setting names; the prune timer, every five
// minutes at 9 s past the wall clock's five-minute marks, is driven on a
// fake clock.
func TestShippedTimersRunOnTheirSchedules(t *testing.T) {
	t.Parallel()
	st, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "fleet.db"))
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close() })
	emu, err := New(Options{Root: repoRoot, Settings: config.Default, Store: st, Log: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)

	settingOf := map[string]string{
		"reaper": config.ReaperSchedule, "redispatch": config.RedispatchSched, "gcsweep": config.GCSchedule,
		"echosweep": config.EchoSchedule, "prune": config.PruneSchedule, "forgesweep": config.ForgeSchedule,
	}
	byName := map[string]*timerTrigger{}
	for _, tt := range emu.timers {
		byName[tt.fn.Name] = tt
		setting, ok := settingOf[tt.fn.Name]
		require.True(t, ok, "timer %s: which setting is its schedule?", tt.fn.Name)
		require.Equal(t, config.Default(setting), tt.expr, "timer %s runs on %s", tt.fn.Name, setting)
	}
	require.Len(t, byName, len(settingOf), "every timer of the app is emulated")

	prune := byName["prune"]
	require.NotNil(t, prune)
	prune.store = &memStatus{}
	r := runTrigger(t, prune, noon, nil) // 12:00:30
	require.False(t, r.waitThenFire(4*time.Minute+39*time.Second).IsPastDue, "first run at 12:05:09")
	require.False(t, r.waitThenFire(5*time.Minute).IsPastDue, "then every five minutes")
}
