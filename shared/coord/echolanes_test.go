package coord_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/gigafactory/fleet/shared/coord/catalog"

	"github.com/gigafactory/fleet/shared/coord/echo"

	"github.com/gigafactory/fleet/shared/store"

	"github.com/stretchr/testify/require"

	"github.com/gigafactory/fleet/shared/coord"
	"github.com/gigafactory/fleet/shared/fleet"
)

const tarpitURL = "https://tarpit.example/fleet"

// ingestFor ingests an item of another product.
func (e *echoEnv) ingestFor(product, repo, item string) store.Item {
	e.t.Helper()
	j, _, err := e.c.Ingest(e.ctx, echo.IngestRequest{ProductID: product, Ref: fleet.TrackerRef{Source: "jira", ItemID: item, Revision: 1}, Manifest: manifest("repo: " + repo)})
	require.NoError(e.t, err)
	it, err := e.raw.Read(e.ctx, store.Jobs, product, j.ID)
	require.NoError(e.t, err)
	return it
}

// handOff runs the echo function's call and fails the test if it does not
// return: the feed must never wait on a webhook.
func (e *echoEnv) handOff(items ...store.Item) echo.Run {
	e.t.Helper()
	type out struct {
		run echo.Run
		err error
	}
	done := make(chan out, 1)
	go func() {
		run, err := e.c.EchoChanged(e.ctx, items, echo.HandOff)
		done <- out{run, err}
	}()
	select {
	case o := <-done:
		require.NoError(e.t, o.err)
		return o.run
	case <-time.After(10 * time.Second):
		e.t.Fatal("the echo function's hand-off waited on a webhook")
		return echo.Run{}
	}
}

// delivered waits for n acknowledged deliveries of job id.
func (e *echoEnv) delivered(id string, n int) {
	e.t.Helper()
	for got := 0; got < n; {
		select {
		case r := <-e.hook.posted:
			if strings.HasPrefix(r.Headers[fleet.EchoEventIDHeader], id+":") {
				got++
			}
		case <-time.After(10 * time.Second):
			e.t.Fatalf("job %s: %d of %d deliveries arrived", id, got, n)
		}
	}
}

// TestEchoTarpitDelaysOnlyItsProduct: product p2's webhook accepts and
// never answers. A change-feed batch holding more of p2's jobs than a lane
// runs at once, then one of prod's, returns at once, and prod's event is
// delivered while every p2 delivery still hangs; so is prod's next batch.
// p2's lane has exactly EchoParallel deliveries hanging: the rest of its
// jobs wait in the lane rather than pile up on the tarpit.
func TestEchoTarpitDelaysOnlyItsProduct(t *testing.T) {
	t.Parallel()
	e := newEchoEnv(t)
	e.hook.posted = make(chan echo.WebhookRequest, 64)
	e.hook.entered = make(chan string, 64)
	release := make(chan struct{})
	e.hook.hold = map[string]chan struct{}{tarpitURL: release}
	_, err := e.c.DeclareProduct(e.ctx, catalog.ProductRequest{ID: "p2", Repos: []string{"docs"},
		Tracker: &catalog.TrackerChange{WebhookURL: tarpitURL, Secret: hookSecret}})
	require.NoError(t, err)

	var batch []store.Item
	for i := range 2 * echo.DefaultParallel {
		batch = append(batch, e.ingestFor("p2", "docs", "SLOW-"+string(rune('a'+i))))
	}
	ok := e.ingest("PROJ-9")
	batch = append(batch, e.rawJob(ok.ID))
	require.Equal(t, echo.Run{Jobs: len(batch)}, e.handOff(batch...))
	e.delivered(ok.ID, 1)
	for i := range echo.DefaultParallel {
		select {
		case <-e.hook.entered:
		case <-time.After(10 * time.Second):
			t.Fatalf("%d of p2's deliveries reached the tarpit, want %d", i, echo.DefaultParallel)
		}
	}

	e.run(ok)
	last := e.job(ok.ID).EventSeq
	e.handOff(append(batch[:len(batch)-1:len(batch)-1], e.rawJob(ok.ID))...)
	e.delivered(ok.ID, int(last-1))
	require.Equal(t, seqRange(1, last), e.hook.seqs(t, ok.ID))
	require.Zero(t, e.hook.triesOf(tarpitURL), "every p2 delivery is still hanging")
	require.Equal(t, echo.DefaultParallel, e.hook.holdingOf(tarpitURL), "p2's lane runs EchoParallel deliveries at once")

	// Let the tarpit go so its lanes end with the test.
	close(release)
	for range len(batch) - 1 {
		select {
		case <-e.hook.posted:
		case <-time.After(10 * time.Second):
			t.Fatal("the released tarpit deliveries did not arrive")
		}
	}
}

// TestEchoLastErrorIsAClass: whatever the webhook's error says (a far
// end's banner, a URL), the delivery state keeps only its class; the log
// keeps the detail.
func TestEchoLastErrorIsAClass(t *testing.T) {
	t.Parallel()
	const farEnd = `INFO {"server_id":"NDXSECRET","version":"2.11"}`
	cases := []struct {
		name string
		err  error
		want string
	}{
		{"classified", &echo.WebhookError{Class: echo.BadResponse, Err: errors.New(`malformed HTTP response "` + farEnd + `"`)}, "bad_response"},
		{"refused address", &echo.WebhookError{Class: echo.RefusedAddress, Err: errors.New("dial 127.0.0.1:4222: " + farEnd)}, "refused_address"},
		{"unclassified", errors.New("Post " + hookURL + ": " + farEnd), "failed"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEchoEnv(t)
			e.hook.setDown(hookURL, true)
			e.hook.fail = tc.err
			j := e.ingest("PROJ-" + tc.name)
			require.Zero(t, e.feed(j.ID))
			v := e.echo(j.ID)
			require.Equal(t, tc.want, *v.LastError)
			require.NotContains(t, *v.LastError, "SECRET")
			require.NotContains(t, *v.LastError, "hooks.example")
			e.mu.Lock()
			defer e.mu.Unlock()
			require.Contains(t, e.logs.String(), "NDXSECRET", "the log keeps the detail")
		})
	}
}

// TestEchoBreakerPerProduct: two products sharing a tracker's URL have a
// breaker each: the one whose deliveries the receiver refuses (a secret it
// does not know) opens its own, and the other's jobs are still delivered.
func TestEchoBreakerPerProduct(t *testing.T) {
	t.Parallel()
	e := newEchoEnvWith(t, coord.Config{EchoBackoff: time.Second, EchoMaxBackoff: 2 * time.Second,
		EchoBreakerFailures: 2, EchoBreakerCooldown: time.Hour})
	_, err := e.c.DeclareProduct(e.ctx, catalog.ProductRequest{ID: "p2", Repos: []string{"docs"},
		Tracker: &catalog.TrackerChange{WebhookURL: hookURL, Secret: "a-secret-the-receiver-does-not-know"}})
	require.NoError(t, err)
	e.hook.mu.Lock()
	e.hook.refused = map[string]bool{"a-secret-the-receiver-does-not-know": true}
	e.hook.mu.Unlock()
	ingest := func(item string) *fleet.Job {
		j, _, err := e.c.Ingest(e.ctx, echo.IngestRequest{ProductID: "p2", Ref: fleet.TrackerRef{Source: "jira", ItemID: item, Revision: 1}, Manifest: manifest("repo: docs")})
		require.NoError(t, err)
		item2, err := e.raw.Read(e.ctx, store.Jobs, "p2", j.ID)
		require.NoError(t, err)
		_, err = e.c.EchoChanged(e.ctx, []store.Item{item2}, echo.Await)
		require.NoError(t, err)
		return j
	}
	ingest("X-1")
	j := ingest("X-2")
	v, err := e.c.Echo(e.ctx, "p2", j.ID)
	require.NoError(t, err)
	require.Equal(t, "http_4xx", *v.LastError)
	j = ingest("X-3")
	v, err = e.c.Echo(e.ctx, "p2", j.ID)
	require.NoError(t, err)
	require.Equal(t, "circuit_open", *v.LastError, "p2's breaker is open")

	ok := e.ingest("PROJ-1")
	require.Equal(t, 1, e.feed(ok.ID), "p1's delivery to the same URL is tried, and lands")
	require.Equal(t, []int64{1}, e.hook.seqs(t, ok.ID))
}

// TestEchoBreaker: after EchoBreakerFailures failures in a row the webhook
// is not tried (circuit_open) until the cooldown has passed on the clock;
// then one delivery probes it: a failed probe opens it again, a good one
// closes it and everything is delivered.
func TestEchoBreaker(t *testing.T) {
	t.Parallel()
	e := newEchoEnvWith(t, coord.Config{EchoBackoff: time.Second, EchoMaxBackoff: 2 * time.Second,
		EchoBreakerFailures: 3, EchoBreakerCooldown: 30 * time.Second})
	e.hook.setDown(hookURL, true)
	var ids []string
	for i := range 3 {
		j := e.ingest("PROJ-" + string(rune('a'+i)))
		ids = append(ids, j.ID)
		require.Zero(t, e.feed(j.ID))
		require.Equal(t, "http_5xx", *e.echo(j.ID).LastError)
	}
	require.Equal(t, 3, e.hook.triesOf(hookURL))

	// Open: a new job is not even tried, and waits out the cooldown.
	d := e.ingest("PROJ-d")
	ids = append(ids, d.ID)
	require.Zero(t, e.feed(d.ID))
	v := e.echo(d.ID)
	require.Equal(t, "circuit_open", *v.LastError)
	require.Equal(t, t0.Add(30*time.Second), *v.NextAttemptAt)
	e.clock.Advance(10 * time.Second)
	require.Zero(t, e.sweep())
	require.Equal(t, 3, e.hook.triesOf(hookURL), "no try while the breaker is open")
	for _, id := range ids {
		require.Equal(t, "circuit_open", *e.echo(id).LastError)
	}

	// Cooled down, still failing: one probe, and open again.
	e.clock.Advance(20 * time.Second)
	require.Zero(t, e.sweep())
	require.Equal(t, 4, e.hook.triesOf(hookURL), "one probe")
	e.clock.Advance(5 * time.Second)
	require.Zero(t, e.sweep())
	require.Equal(t, 4, e.hook.triesOf(hookURL), "open again after the failed probe")

	// Back: the probe closes it, and every job is delivered.
	e.hook.setDown(hookURL, false)
	e.clock.Advance(30 * time.Second)
	for range 3 {
		e.sweep()
		e.clock.Advance(2 * time.Second)
	}
	for _, id := range ids {
		require.Equal(t, []int64{1}, e.hook.seqs(t, id))
		require.Nil(t, e.echo(id).LastError)
	}
}

// targetCheckingWebhook is a webhook that refuses some URLs outright.
type targetCheckingWebhook struct {
	*fakeWebhook
	refused string
}

func (w targetCheckingWebhook) RefusedTarget(url string) error {
	if url == w.refused {
		return errors.New("webhook address 127.0.0.1 is not public")
	}
	return nil
}

// TestProductWebhookTargetRefused: a tracker URL the webhook says it will
// never dial is a 400 naming tracker.webhookUrl, and nothing is written.
func TestProductWebhookTargetRefused(t *testing.T) {
	t.Parallel()
	const refused = "http://127.0.0.1:4222/"
	e := newEnv(t, withDeps(func(d *coord.Deps) { d.Webhook = targetCheckingWebhook{fakeWebhook: &fakeWebhook{}, refused: refused} }))
	_, err := e.c.DeclareProduct(e.ctx, catalog.ProductRequest{ID: "p9", Repos: []string{"r9"},
		Tracker: &catalog.TrackerChange{WebhookURL: refused, Secret: hookSecret}})
	requireCode(t, err, fleet.CodeInvalid, "tracker.webhookUrl")
	_, err = e.c.GetProduct(e.ctx, "p9")
	require.ErrorIs(t, err, fleet.ErrNotFound)
	_, err = e.c.DeclareProduct(e.ctx, catalog.ProductRequest{ID: "p9", Repos: []string{"r9"},
		Tracker: &catalog.TrackerChange{WebhookURL: hookURL, Secret: hookSecret}})
	require.NoError(t, err)
}
