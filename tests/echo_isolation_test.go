package tests

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gigafactory/fleet/shared/fleet"
)

// echoSink is a healthy tracker webhook: it acknowledges at once and keeps
// when each job's first delivery arrived.
type echoSink struct {
	srv   *http.Server
	addr  string
	mu    sync.Mutex
	first map[string]time.Time
}

func newEchoSink(t *testing.T) *echoSink {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	s := &echoSink{addr: ln.Addr().String(), first: map[string]time.Time{}}
	s.srv = &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		at := time.Now()
		body, _ := io.ReadAll(r.Body)
		var ev fleet.EchoEvent
		if json.Unmarshal(body, &ev) == nil {
			s.mu.Lock()
			if _, ok := s.first[ev.JobID]; !ok {
				s.first[ev.JobID] = at
			}
			s.mu.Unlock()
		}
		w.WriteHeader(http.StatusNoContent)
	})}
	go func() { _ = s.srv.Serve(ln) }()
	t.Cleanup(func() { _ = s.srv.Close() })
	return s
}

func (s *echoSink) URL() string { return "http://" + s.addr + "/hook" }

func (s *echoSink) arrived(id string) (time.Time, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	at, ok := s.first[id]
	return at, ok
}

// echoTarpit accepts connections and never answers them.
func echoTarpit(t *testing.T) (url string, accepted func() int) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var (
		mu    sync.Mutex
		conns []net.Conn
	)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			_ = c.Close()
		}
	})
	return "http://" + ln.Addr().String() + "/hook", func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(conns)
	}
}

// echoP99 is the nearest-rank 99th percentile.
func echoP99(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[(len(s)*99+99)/100-1]
}

// TestEchoTarpitDelaysOnlyItsProduct: product alpha's tracker webhook
// accepts connections and never answers; product beta's answers at once.
// Items of both are ingested side by side, at the same pace and at the
// same time, into two identical stacks: one where alpha's webhook is
// healthy (the baseline) and one where it is a tarpit. Beta's
// ingest-to-delivery p99 with the tarpit stays within 2x of the baseline's:
// alpha's tarpit delays only alpha. Measured in lockstep, both runs see the
// same machine: a load burst from whatever else runs lands on the baseline
// too, instead of on one run only.
func TestEchoTarpitDelaysOnlyItsProduct(t *testing.T) {
	t.Parallel()
	const secret = "tracker-shared-secret-0123456789"
	tarpit, accepted := echoTarpit(t)
	// side is one stack and its beta receiver.
	type side struct {
		name string
		s    *Stack
		beta *echoSink
		sent map[string]time.Time
	}
	newSide := func(name, alphaURL string) *side {
		sd := &side{name: name, s: startStack(t, "FLEET_WEBHOOK_ALLOW_CIDRS=127.0.0.0/8"), beta: newEchoSink(t), sent: map[string]time.Time{}}
		for id, url := range map[string]string{"alpha": alphaURL, "beta": sd.beta.URL()} {
			r := sd.s.Op(http.MethodPut, "/products/"+id, "", map[string]any{"repos": []string{id},
				"tracker": map[string]any{"webhookUrl": url, "secret": secret}})
			require.Equal(t, http.StatusOK, r.Status, "%s: %s", name, r.Body)
		}
		return sd
	}
	base, slow := newSide("base", newEchoSink(t).URL()), newSide("tarpit", tarpit)

	const (
		// 100 a run, so the p99 is not the one worst delivery.
		items = 100
		pace  = 60 * time.Millisecond // 6 s a run: past the 5 s header timeout
	)
	// ingest sends one alpha item and one beta item to sd, keeping when
	// beta's was sent.
	ingest := func(sd *side, i int) {
		r := sd.s.Op(http.MethodPost, "/tracker/ingest", "alpha", map[string]any{"source": "jira", "itemId": fmt.Sprintf("A-%d", i),
			"revision": 1, "manifest": Manifest("alpha item", "alpha", "engine:fake")})
		require.Equal(t, http.StatusCreated, r.Status, "%s: %s", sd.name, r.Body)
		at := time.Now()
		r = sd.s.Op(http.MethodPost, "/tracker/ingest", "beta", map[string]any{"source": "jira", "itemId": fmt.Sprintf("B-%d", i),
			"revision": 1, "manifest": Manifest("beta item", "beta", "engine:fake")})
		require.Equal(t, http.StatusCreated, r.Status, "%s: %s", sd.name, r.Body)
		sd.sent[r.Map(t)["id"].(string)] = at
	}
	tick := time.NewTicker(pace)
	for i := range items {
		<-tick.C
		// Each goes first every other tick: neither stack is always the
		// one whose requests wait for the other's.
		first, second := base, slow
		if i%2 == 1 {
			first, second = slow, base
		}
		ingest(first, i)
		ingest(second, i)
	}
	tick.Stop()
	// latencies are sd's beta ingest-to-delivery times, once all arrived.
	latencies := func(sd *side) []time.Duration {
		var lat []time.Duration
		Eventually(t, 90*time.Second, sd.name+": every beta item delivered", func() bool {
			lat = lat[:0]
			for id, at := range sd.sent {
				got, ok := sd.beta.arrived(id)
				if !ok {
					return false
				}
				lat = append(lat, got.Sub(at))
			}
			return true
		})
		return lat
	}
	b, w := echoP99(latencies(base)), echoP99(latencies(slow))
	require.Positive(t, accepted(), "alpha's deliveries went to the tarpit")

	t.Logf("beta ingest-to-delivery p99: %v with alpha healthy, %v with alpha's webhook a tarpit (%d connections held)", b, w, accepted())
	// A floor keeps scheduler noise from failing a baseline of a few
	// milliseconds; a webhook that holds others up costs seconds (the
	// header timeout), far past it.
	limit := 2 * max(b, 250*time.Millisecond)
	require.LessOrEqual(t, w, limit, "beta's p99 with alpha's tarpit (%v) is more than 2x the baseline's (%v)", w, b)
}
