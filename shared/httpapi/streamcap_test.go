package httpapi

import (
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func withStreamCaps(perPrincipal, total int) fixtureOption {
	return func(c *Config) { c.MaxStreamsPerPrincipal, c.MaxStreams = perPrincipal, total }
}

// requireThrottled checks a stream-cap refusal: 429 throttled, Retry-After,
// and a message naming the setting that was reached.
func requireThrottled(t *testing.T, res result, setting string) {
	t.Helper()
	require.Equal(t, 429, res.status, "%s", res.body)
	e := res.errorOf(t)
	require.Equal(t, "throttled", string(e.Code))
	require.Contains(t, e.Message, setting)
	require.Equal(t, "5", res.header.Get("Retry-After"))
}

// waitLogged waits until the access log has the line of request id, which
// is written after the request's stream slot was given back.
func (f *fixture) waitLogged(t *testing.T, id string) {
	t.Helper()
	require.Eventually(t, func() bool { return f.accessLine(id) != nil }, 10*time.Second, 5*time.Millisecond)
}

// TestStreamCapPerPrincipal: a principal past its cap gets 429 throttled
// with Retry-After on every kind of long-lived request, before the store
// is read; other principals are not affected; a slot comes back when its
// stream ends (by itself or by the client leaving) and short requests never
// count.
func TestStreamCapPerPrincipal(t *testing.T) {
	t.Parallel()
	f := newFixture(t, withStreamCaps(2, 100))
	f.putProduct("p1", "r1")
	j := f.submit("p1", manifest("r1"))
	jobStream := "/api/fleet/jobs/" + j.ID + "/events/stream"

	a := f.stream("/api/fleet/events/stream", rootToken, product("p1"))
	a.next()
	b := f.stream(jobStream, rootToken, header("X-Request-Id", "second-stream"))
	b.nextEvent()

	// Every long-lived route refuses the third, and says why.
	for _, path := range []string{
		jobStream,
		"/api/fleet/events/stream",
		"/api/fleet/events?wait=30s",
		"/api/fleet/jobs/" + j.ID + "/events?wait=30s",
	} {
		requireThrottled(t, f.call("GET", path, rootToken, nil, product("p1")), "FLEET_MAX_STREAMS_PER_PRINCIPAL")
	}
	// Refused before anything is read: with the store failing, the answer
	// is still the cap's, not the store's.
	f.faulty.setFailing(true)
	requireThrottled(t, f.call("GET", jobStream, rootToken, nil), "FLEET_MAX_STREAMS_PER_PRINCIPAL")
	f.faulty.setFailing(false)

	// Short requests, and long polls that do not wait, do not count.
	f.ok(200, nil, "GET", "/api/fleet/jobs/"+j.ID, rootToken, nil)
	f.ok(200, nil, "GET", "/api/fleet/events?wait=0s", rootToken, nil, product("p1"))
	f.ok(200, nil, "GET", "/api/fleet/jobs/"+j.ID+"/events", rootToken, nil)
	// A bad wait is still a 400 naming it, not a 429.
	res := f.call("GET", "/api/fleet/events?wait=forever", rootToken, nil, product("p1"))
	require.Equal(t, 400, res.status, "%s", res.body)
	require.Equal(t, "wait", res.errorOf(t).Field)

	// Another principal has its own slots.
	f.stream("/api/fleet/events/stream", p1Token, product("p1")).next()

	// The client leaving gives its slot back.
	b.resp.Body.Close()
	f.waitLogged(t, "second-stream")
	c := f.stream(jobStream, rootToken)
	c.nextEvent()
	requireThrottled(t, f.call("GET", jobStream, rootToken, nil), "FLEET_MAX_STREAMS_PER_PRINCIPAL")

	// So does a stream ending by itself.
	f.clock.Advance(DefaultMaxStream)
	a.ended()
	c.ended()
	f.stream(jobStream, rootToken).nextEvent()
	f.stream("/api/fleet/events/stream", rootToken, product("p1")).next()
}

// TestStreamCapPerProcess: past the process cap every principal is
// refused, naming FLEET_MAX_STREAMS, until a stream ends.
func TestStreamCapPerProcess(t *testing.T) {
	t.Parallel()
	f := newFixture(t, withStreamCaps(2, 3))
	f.putProduct("p1", "r1")
	f.stream("/api/fleet/events/stream", rootToken, product("p1")).next()
	f.stream("/api/fleet/events/stream", rootToken, product("p1")).next()
	last := f.stream("/api/fleet/events/stream", p1Token, product("p1"), header("X-Request-Id", "third"))
	last.next()

	for _, tok := range []string{multiToken, p1Token, rootToken} {
		requireThrottled(t, f.call("GET", "/api/fleet/events/stream", tok, nil, product("p1")), "FLEET_MAX_STREAMS")
	}
	requireThrottled(t, f.call("GET", "/api/fleet/events?wait=10s", multiToken, nil, product("p1")), "FLEET_MAX_STREAMS")
	require.NotContains(t, f.call("GET", "/api/fleet/events/stream", multiToken, nil, product("p1")).errorOf(t).Message,
		"FLEET_MAX_STREAMS_PER_PRINCIPAL", "the process cap, not the principal's, refused it")

	last.resp.Body.Close()
	f.waitLogged(t, "third")
	f.stream("/api/fleet/events/stream", multiToken, product("p1")).next()
}

// TestStreamCapCountsLongPolls: a long poll holds its slot while it waits
// and gives it back when it answers.
func TestStreamCapCountsLongPolls(t *testing.T) {
	t.Parallel()
	f := newFixture(t, withStreamCaps(1, 10))
	f.putProduct("p1", "r1")
	made := f.clock.TickerMade()
	done := make(chan result, 1)
	go func() { done <- f.call("GET", "/api/fleet/events?wait=30s", rootToken, nil, product("p1")) }()
	<-made // the long poll waits on the clock
	requireThrottled(t, f.call("GET", "/api/fleet/events/stream", rootToken, nil, product("p1")), "FLEET_MAX_STREAMS_PER_PRINCIPAL")
	// The ticker made first may be the live watcher's, which the poll's
	// subscription starts beside it: the poll's own may come after an
	// advance, which then never reaches it. Advance again for each one made
	// until the poll answers.
	for answered := false; !answered; {
		f.clock.Advance(30 * time.Second)
		select {
		case res := <-done:
			require.Equal(t, 200, res.status)
			answered = true
		case <-made:
		}
	}
	f.stream("/api/fleet/events/stream", rootToken, product("p1")).next()
}

// TestFactoryStreamsOnlyJobsItHolds: a factory's token may follow a job it
// holds, and gets 403 for one of its products that it does not hold
// (before the lease, after it, or held by another factory); the refusal
// frees its slot.
func TestFactoryStreamsOnlyJobsItHolds(t *testing.T) {
	t.Parallel()
	f := newFixture(t, withStreamCaps(1, 10))
	f.putProduct("p1", "r1")
	t1 := f.enroll("f1", []string{"p1"}, "r1")
	t2 := f.enroll("f2", []string{"p1"}, "r1")
	j := f.submit("p1", manifest("r1"))
	path := "/api/fleet/jobs/" + j.ID + "/events/stream"

	notHeld := func(tok, factory string) {
		t.Helper()
		res := f.call("GET", path, tok, nil)
		require.Equal(t, 403, res.status, "%s", res.body)
		e := res.errorOf(t)
		require.Equal(t, "forbidden", string(e.Code))
		require.Contains(t, e.Message, "not held by factory "+factory)
	}
	notHeld(t1, "f1") // queued: nobody holds it
	// The factory may still read it; it may not follow it.
	f.ok(200, nil, "GET", "/api/fleet/jobs/"+j.ID, t1, nil)

	c := f.claim(t1)
	require.Equal(t, j.ID, c.Job.ID)
	notHeld(t2, "f2")
	s := f.stream(path, t1)
	s.nextEvent()
	s.resp.Body.Close()

	f.ok(200, nil, "POST", "/api/fleet/jobs/"+j.ID+"/lease/release", t1, map[string]any{"leaseEpoch": c.LeaseEpoch})
	// The 403s above gave their slots back (the cap is 1).
	require.Eventually(t, func() bool { return f.call("GET", path, t1, nil).status == 403 }, 10*time.Second, 5*time.Millisecond)
	notHeld(t1, "f1")
	// Operators are not held to it.
	f.stream(path, rootToken).nextEvent()
}

// TestStreamsForwardedByTheHostAreBuffered: a request the Functions host
// forwarded (its User-Agent carries Azure-Functions-Host/<version>) gets
// the buffered answer, since the host hands nothing on before the end: it
// ends once it has sent events, or after maxWait with the position to
// resume from. The same stream without that User-Agent stays live.
func TestStreamsForwardedByTheHostAreBuffered(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	j, _, _ := f.heldJob()
	path := "/api/fleet/jobs/" + j.ID + "/events/stream"
	forwarded := header("User-Agent", "fleetctl/1.0 Azure-Functions-Host/4.1037.0")

	s := f.stream(path, rootToken, forwarded)
	for _, want := range []string{"1", "2"} {
		b, _ := s.nextEvent()
		require.Equal(t, want, b.id)
	}
	s.ended()

	p := f.stream("/api/fleet/events/stream", rootToken, product("p1"), forwarded)
	require.True(t, p.next().hasID)
	f.clock.Advance(maxWait)
	p.ended()

	// Proxied (no such User-Agent): the same streams stay open.
	live := f.stream(path, rootToken, header("User-Agent", "Azure-Functions-Host-ish/1 curl/8"))
	for range 2 {
		live.nextEvent()
	}
	f.clock.Advance(maxWait)
	select {
	case <-live.done:
		t.Fatal("a proxied stream ended after its replay")
	default:
	}
}

func TestForwardedByHost(t *testing.T) {
	t.Parallel()
	for ua, want := range map[string]bool{
		"Azure-Functions-Host/4.1037.0":                   true,
		"Mozilla/5.0 (X11) Azure-Functions-Host/4.1037.0": true,
		"curl/8.5.0":                false,
		"":                          false,
		"Azure-Functions-Hosting/1": false,
		"my-Azure-Functions-Host/1 (not the host's own token)": false,
	} {
		r := httptest.NewRequest("GET", "/api/fleet/events/stream", nil)
		if ua != "" {
			r.Header.Set("User-Agent", ua)
		}
		require.Equal(t, want, forwardedByHost(r), "User-Agent %q", ua)
	}
}

// TestStreamsEndBeforeTheAzureFrontEndLimit: a live stream ends by itself
// before the 230 s after which the Azure front end drops a request,
// whatever its keep-alive ticks.
func TestStreamsEndBeforeTheAzureFrontEndLimit(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.putProduct("p1", "r1")
	p := f.stream("/api/fleet/events/stream", rootToken, product("p1"))
	require.True(t, p.next().hasID)
	f.clock.Advance(229 * time.Second)
	p.ended()
}

// TestEveryLongLivedRouteIsCapped: a route that streams or takes ?wait=
// counts against the caps; a new one cannot be added without.
func TestEveryLongLivedRouteIsCapped(t *testing.T) {
	t.Parallel()
	for _, rt := range routes {
		switch {
		case strings.HasSuffix(rt.pattern, "/stream"):
			require.Equal(t, alwaysLong, rt.long, rt.pattern)
		case slices.Contains(rt.queryNames(), "wait"):
			require.Equal(t, longWithWait, rt.long, rt.pattern)
		default:
			require.Equal(t, shortLived, rt.long, rt.pattern)
		}
	}
}
