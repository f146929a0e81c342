package tests

import (
	"encoding/json"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gigafactory/fleet/shared/fleet"
)

// trackerHook is a tracker's webhook receiver: a real HTTP server on a
// loopback port that is refused (no listener) until it is started, then
// answers 500 at random. It checks every delivery's signature and keeps
// the first acknowledged delivery of each event id in arrival order.
type trackerHook struct {
	t      *testing.T
	port   *reservedPort
	addr   string
	secret fleet.Secret
	rnd    *rand.Rand

	mu       sync.Mutex
	srv      *http.Server
	seen     map[string]bool
	order    []fleet.EchoEvent
	answered map[int]int
	badSig   []string
}

func newTrackerHook(t *testing.T, secret fleet.Secret) *trackerHook {
	t.Helper()
	// A port nothing listens on until start: connections are refused.
	port := reservePort(t)
	seed := uint64(time.Now().UnixNano())
	t.Logf("webhook at %s, 500s seeded with %d", port.addr, seed)
	return &trackerHook{t: t, port: port, addr: port.addr, secret: secret, rnd: rand.New(rand.NewPCG(seed, 1)),
		seen: map[string]bool{}, answered: map[int]int{}}
}

func (h *trackerHook) URL() string { return "http://" + h.addr + "/hook" }

// reservedPort is a loopback TCP socket bound but not listening:
// connections to its port are refused, and no other socket can take the
// port before listen makes it the listener. (A listener closed to free its
// port, as this once did, could lose it to a parallel test meanwhile.)
type reservedPort struct {
	fd   int
	addr string
}

func reservePort(t *testing.T) *reservedPort {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	require.NoError(t, err)
	syscall.CloseOnExec(fd)
	p := &reservedPort{fd: fd}
	t.Cleanup(func() {
		if p.fd >= 0 {
			_ = syscall.Close(p.fd)
		}
	})
	require.NoError(t, syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}))
	sa, err := syscall.Getsockname(fd)
	require.NoError(t, err)
	p.addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(sa.(*syscall.SockaddrInet4).Port))
	return p
}

// listen makes the reserved socket a listener.
func (p *reservedPort) listen(t *testing.T) net.Listener {
	t.Helper()
	require.NoError(t, syscall.Listen(p.fd, syscall.SOMAXCONN))
	f := os.NewFile(uintptr(p.fd), "webhook")
	p.fd = -1 // f owns it now
	defer f.Close()
	ln, err := net.FileListener(f) // its own copy of the descriptor
	require.NoError(t, err)
	return ln
}

// start listens on the reserved port; from then on every other delivery or
// so fails with 500, the first one always.
func (h *trackerHook) start() {
	h.t.Helper()
	ln := h.port.listen(h.t)
	h.mu.Lock()
	h.srv = &http.Server{Handler: http.HandlerFunc(h.serve), ReadHeaderTimeout: 5 * time.Second}
	srv := h.srv
	h.mu.Unlock()
	go func() { _ = srv.Serve(ln) }()
	h.t.Cleanup(func() { _ = srv.Close() })
}

func (h *trackerHook) serve(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	h.mu.Lock()
	defer h.mu.Unlock()
	if err != nil || r.Method != http.MethodPost {
		h.answered[http.StatusBadRequest]++
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	if !fleet.VerifyEcho(h.secret, body, r.Header.Get("X-Fleet-Signature")) {
		h.badSig = append(h.badSig, string(body))
		h.answered[http.StatusUnauthorized]++
		w.WriteHeader(http.StatusUnauthorized)
		return
	}
	if h.answered[http.StatusInternalServerError] == 0 || h.rnd.IntN(2) == 0 {
		h.answered[http.StatusInternalServerError]++
		w.WriteHeader(http.StatusInternalServerError)
		return
	}
	var ev fleet.EchoEvent
	if json.Unmarshal(body, &ev) != nil {
		h.answered[http.StatusBadRequest]++
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	id := r.Header.Get("X-Fleet-Event-Id")
	if id != fleet.EchoEventID(ev.JobID, ev.Seq) {
		h.badSig = append(h.badSig, "event id "+id+" for "+string(body))
	}
	if !h.seen[id] {
		h.seen[id] = true
		h.order = append(h.order, ev)
	}
	h.answered[http.StatusNoContent]++
	w.WriteHeader(http.StatusNoContent)
}

func (h *trackerHook) received() ([]fleet.EchoEvent, map[int]int, []string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	answered := map[int]int{}
	for k, v := range h.answered {
		answered[k] = v
	}
	return append([]fleet.EchoEvent(nil), h.order...), answered, append([]string(nil), h.badSig...)
}

// TestTrackerEchoThroughOutage: a tracker item ingested on the real stack is
// one job (re-ingest: the same; a higher revision before start: updated),
// run by a real factory process; its webhook is down (connection refused)
// for the first half of the job's life and answers 500 at random after, and
// still receives every event of the job, in seq order, correctly signed,
// delivered by the echo function and its sweep.
func TestTrackerEchoThroughOutage(t *testing.T) {
	t.Parallel()
	const secret = fleet.Secret("tracker-shared-secret-0123456789")
	hook := newTrackerHook(t, secret)
	// The receiver is on loopback, which webhooks may reach only when
	// allowed.
	s := startStack(t, "FLEET_ECHO_BACKOFF=200ms", "FLEET_ECHO_MAX_BACKOFF=1s", "FLEET_ECHO_SCHEDULE=* * * * * *",
		"FLEET_WEBHOOK_ALLOW_CIDRS=127.0.0.0/8", "FLEET_ECHO_BREAKER_COOLDOWN=1s")
	repo := newFacRepo(t, "app")
	r := s.Op(http.MethodPut, "/products/demo", "", map[string]any{"repos": []string{"app"},
		"tracker": map[string]any{"webhookUrl": hook.URL(), "secret": string(secret)}})
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	require.NotContains(t, string(r.Body), string(secret))

	ingest := func(rev int, title string) Response {
		return s.Op(http.MethodPost, "/tracker/ingest", "demo", map[string]any{"source": "jira", "itemId": "APP-7",
			"revision": rev, "manifest": Manifest(title, "app", "engine:fake")})
	}
	r = ingest(1, "First take")
	require.Equal(t, http.StatusCreated, r.Status, "%s", r.Body)
	id := r.Map(t)["id"].(string)
	r = ingest(1, "First take")
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	require.Equal(t, id, r.Map(t)["id"], "the same item is the same job")
	r = ingest(2, "Second take")
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	require.Equal(t, "updated", r.Header.Get("X-Fleet-Ingest"))
	job := r.Map(t)
	require.Equal(t, id, job["id"])
	require.Equal(t, "Second take", job["title"])
	require.Equal(t, map[string]any{"source": "jira", "itemId": "APP-7", "revision": float64(2)}, job["tracker"])

	// Down: every attempt so far is refused, and the state says so.
	Eventually(t, 30*time.Second, "the echo state records the refused connection", func() bool {
		e := s.Op(http.MethodGet, "/jobs/"+id+"/echo", "demo", nil).Map(t)
		last, _ := e["lastError"].(string)
		return last == "connection_refused"
	})

	// The engine works until the test lets it finish: the first half of
	// the job's life (submitted, claimed, building) passes with the
	// webhook down, the second (delivered, shipped) with it flaky.
	proceed := filepath.Join(t.TempDir(), "proceed")
	eng := facEngine(t, `while [ ! -e '`+proceed+`' ]; do sleep 0.1; done; echo done > done.txt`)
	startFactory(t, s, "fa", "demo", 1, repo, eng)
	facWaitStage(t, s, "demo", id, "building", 60*time.Second)
	e := s.Op(http.MethodGet, "/jobs/"+id+"/echo", "demo", nil).Map(t)
	require.Equal(t, float64(0), e["deliveredSeq"], "nothing can have been delivered while the webhook was down: %v", e)
	hook.start()
	require.NoError(t, os.WriteFile(proceed, nil, 0o600))

	facWaitStage(t, s, "demo", id, "shipped", 90*time.Second)
	var latest float64
	Eventually(t, 60*time.Second, "every event delivered", func() bool {
		e = s.Op(http.MethodGet, "/jobs/"+id+"/echo", "demo", nil).Map(t)
		latest = e["latestSeq"].(float64)
		return e["deliveredSeq"] == latest && e["pendingSeq"] == nil
	})

	var events struct {
		Items []fleet.Event `json:"items"`
	}
	s.Op(http.MethodGet, "/jobs/"+id+"/events", "demo", nil).JSON(t, &events)
	require.Len(t, events.Items, int(latest))
	got, answered, bad := hook.received()
	t.Logf("webhook answers: %v; %d events", answered, len(got))
	require.Empty(t, bad, "deliveries with a bad signature or event id")
	require.Positive(t, answered[http.StatusInternalServerError], "the webhook failed some deliveries")
	require.Len(t, got, len(events.Items), "answered: %v", answered)
	for i, ev := range events.Items {
		require.Equal(t, ev.Seq, got[i].Seq, "delivery %d out of order: %v", i, got)
		require.Equal(t, ev.Type, got[i].Type)
		require.Equal(t, id, got[i].JobID)
		require.Equal(t, "APP-7", got[i].ItemID)
		require.Equal(t, "demo", got[i].ProductID)
		require.True(t, ev.At.Equal(got[i].At), "event %d at %v, delivered as %v", ev.Seq, ev.At, got[i].At)
	}
	require.Equal(t, fleet.StageShipped, got[len(got)-1].Stage)

	// A higher revision now is refused: the job started.
	r = ingest(3, "Third take")
	require.Equal(t, http.StatusConflict, r.Status, "%s", r.Body)
	require.Equal(t, "revision", r.Map(t)["error"].(map[string]any)["field"])
	require.NotContains(t, s.out.String(), string(secret), "the secret never reaches the logs")
}

// TestTrackerWebhookRefusesLoopback: a product operator who points the
// tracker webhook at a service on the stack's own host (here something
// that greets like NATS) gets nothing through and reads nothing back: a
// literal loopback address is refused when set (400 naming
// tracker.webhookUrl), a name that resolves to it when the echo dials, and
// the echo state then says only refused_address.
func TestTrackerWebhookRefusesLoopback(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = ln.Close() })
	var mu sync.Mutex
	accepted := 0
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			accepted++
			mu.Unlock()
			_, _ = io.WriteString(conn, "INFO {\"server_id\":\"NSECRETBANNER\",\"version\":\"2.11\"}\r\n")
			_ = conn.Close()
		}
	}()
	_, port, err := net.SplitHostPort(ln.Addr().String())
	require.NoError(t, err)
	s := startStack(t, "FLEET_ECHO_BACKOFF=200ms", "FLEET_ECHO_MAX_BACKOFF=1s", "FLEET_ECHO_SCHEDULE=* * * * * *")
	const secret = "tracker-shared-secret-0123456789"
	r := s.Op(http.MethodPut, "/products/ssrf", "", map[string]any{"repos": []string{"ssrf"},
		"tracker": map[string]any{"webhookUrl": "http://127.0.0.1:" + port + "/", "secret": secret}})
	require.Equal(t, http.StatusBadRequest, r.Status, "%s", r.Body)
	require.Equal(t, "tracker.webhookUrl", r.Map(t)["error"].(map[string]any)["field"])

	// A name is judged where it resolves, when the echo dials.
	url, product := "http://localhost:"+port+"/x", "ssrfname"
	r = s.Op(http.MethodPut, "/products/"+product, "", map[string]any{"repos": []string{product},
		"tracker": map[string]any{"webhookUrl": url, "secret": secret}})
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	r = s.Op(http.MethodPost, "/tracker/ingest", product, map[string]any{"source": "jira", "itemId": "SSRF-1",
		"revision": 1, "manifest": Manifest("probe", product, "engine:fake")})
	require.Equal(t, http.StatusCreated, r.Status, "%s", r.Body)
	id := r.Map(t)["id"].(string)
	var e map[string]any
	Eventually(t, 30*time.Second, "the echo state records a refused address", func() bool {
		e = s.Op(http.MethodGet, "/jobs/"+id+"/echo", product, nil).Map(t)
		return e["lastError"] != nil && e["attempts"].(float64) >= 2
	})
	require.Equal(t, "refused_address", e["lastError"], "%s: %v", url, e)
	require.Equal(t, float64(0), e["deliveredSeq"])
	mu.Lock()
	defer mu.Unlock()
	require.Zero(t, accepted, "the echo never connected")
	require.NotContains(t, s.out.String(), "NSECRETBANNER")
}
