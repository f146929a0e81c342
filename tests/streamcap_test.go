package tests

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Issue 23, item 2: one factory token opening thousands of job event
// streams exhausted the stack's file descriptors and stalled every other
// product. TestStreamsPastTheCapLeaveOthersAlone opens streams past the cap
// with one factory token while another product works on, and holds that
// product's p99 request latency during the attack to at most twice what it
// was without it.
//
// Robustness on a small shared machine, without weakening the claim: the
// "before" and "during" samples are taken in 50 short alternating windows
// (quiet, attack, quiet, attack, ...), so load from outside the test (other
// test binaries, builds, each lasting longer than a window) falls on both
// sides alike instead of on whichever phase ran when it happened. Each
// window is 100 requests, and the attack runs for the whole of its window
// (it starts with the window's first request and stops after its last):
// with 5,000 samples a side, p99 is the 50th worst, so the dozen or so
// stalls another process's burst puts into a run cannot decide it by which
// side they happen to fall on, as they could decide the 15th worst of
// 1,500 (30-request windows timed only in the attack's first 60 ms; its
// last 300 ms went unmeasured). The attack: one factory token holding the
// cap's 32 streams of one job open in each attack window and asking for
// more at 250/s from 2 workers over kept-alive connections (about 4,000
// refused in all); the other product's requests are timed while those are
// being refused. The stack fell over from the streams held open,
// which the caps bound; the refused requests still cost CPU, and fired as
// fast as they were refused (about 1,000/s) they took p99 to 1.79x in one
// run of eight on two cores: a flood of any request competes for the cores
// whatever the caps do, a matter for rate limiting, which the caps do not
// claim.
func TestStreamsPastTheCapLeaveOthersAlone(t *testing.T) {
	const (
		capPerPrincipal = 32 // the default of FLEET_MAX_STREAMS_PER_PRINCIPAL
		rounds          = 50
		samplesPerRound = 100 // requests of the other product per window
		attackers       = 2   // workers asking for streams past the cap
		attackRate      = 250 // refused requests per second (see above)
	)
	// The store on tmpfs where there is one: what is measured is the
	// coordinator's answer to the attack, which reads nothing from the
	// store, and a shared machine's fsync stalls would only add noise.
	env := []string{"FLEET_LEASE_TTL=10m"}
	if st, err := os.Stat("/dev/shm"); err == nil && st.IsDir() {
		dir, err := os.MkdirTemp("/dev/shm", "fleet-streamcap-")
		require.NoError(t, err)
		t.Cleanup(func() { _ = os.RemoveAll(dir) })
		env = append(env, "FLEET_DATA_DIR="+dir)
	}
	s := startStack(t, env...)
	s.Product("attack", "r-attack")
	s.Product("victim", "r-victim")
	attacker := s.Factory("fa", "attack", 4, []string{"os:linux"}, []string{"r-attack"})
	bystander := s.Factory("fa2", "attack", 4, []string{"os:linux"}, []string{"r-attack"})
	victim := s.Factory("fv", "victim", 4, []string{"os:linux"}, []string{"r-victim"})

	held := s.Submit("attack", Manifest("held", "r-attack", "os:linux"))
	claimed, epoch := s.Claim(attacker)
	require.Equal(t, held, claimed)
	streamURL := s.API + "/jobs/" + held + "/events/stream"

	// A factory may stream only a job it holds: another factory of the
	// same product is refused, before any slot is spent.
	r := s.As(bystander, http.MethodGet, "/jobs/"+held+"/events/stream", "", nil)
	require.Equal(t, http.StatusForbidden, r.Status, "%s", r.Body)
	require.Contains(t, string(r.Body), "not held by factory fa2")

	streamTransport := &http.Transport{MaxIdleConnsPerHost: 64, DisableCompression: true}
	t.Cleanup(streamTransport.CloseIdleConnections)
	streamClient := &http.Client{Transport: streamTransport}

	// The other product's work: a heartbeat, a submit and a read, timed.
	victimTransport := &http.Transport{MaxIdleConnsPerHost: 4}
	t.Cleanup(victimTransport.CloseIdleConnections)
	victimClient := &http.Client{Transport: victimTransport, Timeout: 30 * time.Second}
	var submitted atomic.Int64
	timed := func(method, path, token, product string, body any) (time.Duration, []byte) {
		t.Helper()
		var rd io.Reader
		ct := ""
		switch b := body.(type) {
		case nil:
		case string:
			rd, ct = strings.NewReader(b), "text/markdown"
		default:
			data, err := json.Marshal(b)
			require.NoError(t, err)
			rd, ct = bytes.NewReader(data), "application/json"
		}
		req, err := http.NewRequestWithContext(t.Context(), method, s.API+path, rd)
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+token)
		if ct != "" {
			req.Header.Set("Content-Type", ct)
		}
		if product != "" {
			req.Header.Set("x-product-id", product)
		}
		start := time.Now()
		resp, err := victimClient.Do(req)
		require.NoError(t, err)
		data, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		took := time.Since(start)
		require.NoError(t, err)
		require.Less(t, resp.StatusCode, 300, "%s %s: %d %s", method, path, resp.StatusCode, data)
		return took, data
	}
	var lastJob string
	sample := func(n int) []time.Duration {
		out := make([]time.Duration, 0, n)
		for i := 0; len(out) < n; i++ {
			var took time.Duration
			var body []byte
			switch i % 3 {
			case 0:
				took, _ = timed(http.MethodPost, "/factories/heartbeat", victim, "", map[string]any{
					"capabilities": []string{"os:linux"}, "repos": []string{"r-victim"}, "load": 0, "health": "ok"})
			case 1:
				took, body = timed(http.MethodPost, "/jobs", s.Token, "victim",
					Manifest(fmt.Sprintf("victim job %d", submitted.Add(1)), "r-victim", "os:linux"))
				var j struct{ ID string }
				require.NoError(t, json.Unmarshal(body, &j))
				lastJob = j.ID
			case 2:
				took, _ = timed(http.MethodGet, "/jobs/"+lastJob, s.Token, "victim", nil)
			}
			out = append(out, took)
		}
		return out
	}

	// openStream opens one stream as the attacker and returns its status
	// and, when open, a reader of its events.
	type openStream struct {
		resp   *http.Response
		cancel context.CancelFunc
		events chan string
	}
	open := func() (int, string, *openStream) {
		ctx, cancel := context.WithCancel(t.Context())
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, streamURL, nil)
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+attacker)
		resp, err := streamClient.Do(req)
		if err != nil {
			cancel()
			require.NoError(t, err)
		}
		if resp.StatusCode != http.StatusOK {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			cancel()
			return resp.StatusCode, resp.Header.Get("Retry-After"), nil
		}
		st := &openStream{resp: resp, cancel: cancel, events: make(chan string, 64)}
		go func() {
			defer close(st.events)
			sc := bufio.NewScanner(resp.Body)
			for sc.Scan() {
				if ev, ok := strings.CutPrefix(sc.Text(), "event: "); ok {
					st.events <- ev
				}
			}
		}()
		return resp.StatusCode, "", st
	}
	closeAll := func(streams []*openStream) {
		for _, st := range streams {
			st.cancel()
			st.resp.Body.Close()
			for range st.events { // drained once the reader sees the close
			}
		}
	}

	var before, during []time.Duration
	var refused, attempts atomic.Int64
	var attacking time.Duration
	var streams []*openStream
	for round := range rounds {
		before = append(before, sample(samplesPerRound)...)

		// The attack: the cap's worth of streams, held open...
		streams = streams[:0]
		freed := time.Now().Add(30 * time.Second)
		for len(streams) < capPerPrincipal {
			code, _, st := open()
			if code == http.StatusTooManyRequests && time.Now().Before(freed) {
				// The previous round's slots are given back as their
				// handlers see the clients gone; wait for them.
				time.Sleep(20 * time.Millisecond)
				continue
			}
			require.Equal(t, http.StatusOK, code, "round %d: stream %d of the cap", round, len(streams)+1)
			streams = append(streams, st)
		}
		// ...and more asked for, all the while the other product works.
		stop := make(chan struct{})
		burst := time.Now()
		pace := time.NewTicker(time.Second / attackRate)
		var wg sync.WaitGroup
		for range attackers {
			wg.Go(func() {
				for {
					select {
					case <-stop:
						return
					case <-pace.C:
					}
					code, retryAfter, st := open()
					attempts.Add(1)
					if st != nil {
						closeAll([]*openStream{st})
						t.Errorf("a stream past the cap was opened (round %d)", round)
						return
					}
					if code != http.StatusTooManyRequests || retryAfter == "" {
						t.Errorf("a stream past the cap got %d with Retry-After %q, want 429 with one", code, retryAfter)
						return
					}
					refused.Add(1)
				}
			})
		}
		during = append(during, sample(samplesPerRound)...)
		close(stop)
		wg.Wait()
		pace.Stop()
		attacking += time.Since(burst)

		// The streams that were admitted still work.
		if round == rounds-1 {
			r := s.As(attacker, http.MethodPatch, "/jobs/"+held, "attack", map[string]any{"stage": "building", "leaseEpoch": epoch})
			require.Equal(t, http.StatusOK, r.Status, "patch: %s", r.Body)
			for i, st := range streams {
				require.True(t, waitEvent(t, st.events, "stage"), "open stream %d saw the job move to building", i+1)
			}
		}
		closeAll(streams)
	}
	require.False(t, t.Failed())
	require.Positive(t, refused.Load())

	p99Before, p99During := p99(before), p99(during)
	t.Logf("other product's request latency over %d requests each: p99 %v without the attack, %v during it (p50 %v / %v); %d stream requests past the cap refused with 429 (%d tried, %.0f/s), %d held open",
		len(before), p99Before, p99During, p50(before), p50(during), refused.Load(), attempts.Load(),
		float64(attempts.Load())/attacking.Seconds(), capPerPrincipal)
	require.LessOrEqual(t, p99During, 2*p99Before,
		"p99 latency of another product during the attack (%v) is more than twice its p99 without it (%v)", p99During, p99Before)
}

// waitEvent reports whether an event of type want arrives on events within
// 30 s.
func waitEvent(t *testing.T, events <-chan string, want string) bool {
	t.Helper()
	deadline := time.After(30 * time.Second)
	for {
		select {
		case ev, ok := <-events:
			if !ok {
				return false
			}
			if ev == want {
				return true
			}
		case <-deadline:
			return false
		}
	}
}

func p99(d []time.Duration) time.Duration { return percentile(d, 0.99) }
func p50(d []time.Duration) time.Duration { return percentile(d, 0.50) }

func percentile(d []time.Duration, q float64) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	i := int(float64(len(s))*q+0.5) - 1
	return s[max(0, min(i, len(s)-1))]
}

// TestStreamsThroughAForwardingHost: where the Functions host forwards
// instead of proxying (FLEET_HOST_HTTP_MODE=forward plays it), every answer
// is buffered until it ends. A job stream through it must answer as a long
// poll: the replay at once, and a reconnect with Last-Event-ID as soon as
// the next event happens, instead of hanging until the stream's 200 s end.
func TestStreamsThroughAForwardingHost(t *testing.T) {
	t.Parallel()
	s := startStack(t, "FLEET_HOST_HTTP_MODE=forward")
	s.Product("demo", "r1")
	id := s.Submit("demo", Manifest("followed", "r1"))
	url := s.API + "/jobs/" + id + "/events/stream"

	get := func(lastID string) (string, time.Duration) {
		t.Helper()
		ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
		defer cancel()
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+s.Token)
		if lastID != "" {
			req.Header.Set("Last-Event-ID", lastID)
		}
		start := time.Now()
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err, "the forwarding host answered the stream (it buffers until the stream ends)")
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		require.NoError(t, err, "the stream ended by itself through the forwarding host")
		require.Equal(t, http.StatusOK, resp.StatusCode, "%s", body)
		return string(body), time.Since(start)
	}

	body, took := get("")
	require.Contains(t, body, "id: 1\nevent: submitted\n")
	require.Less(t, took, 10*time.Second, "the replay came at once, not at the stream's end")

	type answer struct {
		body string
		took time.Duration
	}
	next := make(chan answer, 1)
	go func() {
		b, d := get("1")
		next <- answer{b, d}
	}()
	time.Sleep(500 * time.Millisecond) // the long poll is waiting
	r := s.Op(http.MethodPost, "/jobs/"+id+"/actions/cancel", "demo", map[string]any{"reason": "done watching"})
	require.Equal(t, http.StatusOK, r.Status, "cancel: %s", r.Body)
	a := <-next
	require.Contains(t, a.body, "id: 2\nevent: cancel\n")
	require.NotContains(t, a.body, "event: submitted", "resumed after id 1")
	require.Less(t, a.took, 15*time.Second)
}
