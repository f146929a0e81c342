package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"math"
	mrand "math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/gigafactory/fleet/shared/api"
	"github.com/gigafactory/fleet/shared/fleet"
)

// campaign is one chaos run's settings.
type campaign struct {
	Factories, Seats, Jobs int
	Faults, FaultEvery     time.Duration
	Drain                  time.Duration
	StoreFaults            string
	Seed                   uint64
	Verbose                bool
}

// The products: most jobs go to product; one in five to budgetProduct,
// whose budget's ceiling stops it part-way through the campaign.
const (
	product       = "chaos"
	budgetProduct = "chaos-budget"
)

// repoOf is each product's repository (a repository has one owner).
var repoOf = map[string]string{product: "app", budgetProduct: "ledger"}

// Fault kinds, as reported.
const (
	faultKill9      = "factory kill -9"
	faultStop       = "factory SIGSTOP/SIGCONT"
	faultHandler    = "handler kill -9"
	faultStack      = "stack+broker restart"
	faultNetDrop    = "net drop"
	faultNetDelay   = "net delay"
	faultNetReset   = "net reset"
	faultStoreError = "store error"
	faultStoreDelay = "store latency"
)

type runner struct {
	c     campaign
	out   io.Writer
	rng   *mrand.Rand
	rngMu sync.Mutex
	st    *stack
	op    *api.Client
	voter *api.Client
	px    *proxy
	facs  []*factoryProc

	faultMu   sync.Mutex
	faults    map[string]int64
	faultErrs []string

	idsMu     sync.Mutex
	submitted []string

	storeFaultsMu         sync.Mutex
	storeErrs, storeDelay int64
	lastErrs, lastDelay   int64
}

func (r *runner) intn(n int) int {
	r.rngMu.Lock()
	defer r.rngMu.Unlock()
	return r.rng.IntN(n)
}

func (r *runner) float() float64 {
	r.rngMu.Lock()
	defer r.rngMu.Unlock()
	return r.rng.Float64()
}

func (r *runner) count(kind string) {
	r.faultMu.Lock()
	r.faults[kind]++
	r.faultMu.Unlock()
}

func (r *runner) logf(format string, args ...any) {
	if r.c.Verbose {
		fmt.Fprintf(r.out, "%s "+format+"\n", append([]any{time.Now().Format("15:04:05.000")}, args...)...)
	}
}

func token(prefix string) string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}

// Run runs the campaign and prints its report.
func (c campaign) Run(ctx context.Context, out io.Writer) (*report, error) {
	began := time.Now()
	root, err := findRoot()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "fleet-chaos-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	defer killStrays(dir)
	fmt.Fprintf(out, "chaos: seed %d, %d factories x %d seats, %d jobs, faults for %s, drain %s, store faults %q\n",
		c.Seed, c.Factories, c.Seats, c.Jobs, c.Faults, c.Drain, c.StoreFaults)
	bins, err := build(ctx, root, filepath.Join(dir, "bin"))
	if err != nil {
		return nil, err
	}
	r := &runner{c: c, out: out, rng: mrand.New(mrand.NewPCG(c.Seed, 1)), faults: map[string]int64{}}
	admin, alice := token("admin_"), token("alice_")
	tokens := "admin:" + admin + ",alice:" + alice
	common := []string{
		"FLEET_OPERATOR_TOKEN=" + tokens,
		// Short leases and frequent sweeps, so a killed or stopped holder's
		// job is reassigned within seconds, while its engine may still run.
		"FLEET_LEASE_TTL=6s",
		"FLEET_REAPER_SCHEDULE=*/2 * * * * *",
		"FLEET_REDISPATCH_AFTER=5s",
		"FLEET_REDISPATCH_SCHEDULE=*/5 * * * * *",
		"FLEET_CANCEL_GRACE=10s",
	}
	r.st, err = newStack(root, bins, filepath.Join(dir, "data"), append(common, "FLEET_STORE_FAULTS="+c.StoreFaults))
	if err != nil {
		return nil, err
	}
	if err := r.st.start(ctx); err != nil {
		return nil, err
	}
	defer r.st.stop()
	hc := &http.Client{Timeout: 20 * time.Second}
	r.op = api.New(api.Config{BaseURL: r.st.URL(), Token: admin, Product: product, HTTPClient: hc})
	r.voter = api.New(api.Config{BaseURL: r.st.URL(), Token: alice, Product: product, HTTPClient: hc})
	for _, p := range []string{product, budgetProduct} {
		if err := r.retry(ctx, func() error {
			return call(ctx, r.op, http.MethodPut, "/products/"+p, p, map[string]any{"repos": []string{repoOf[p]}}, nil)
		}); err != nil {
			return nil, err
		}
	}
	// A total ceiling about half the budgeted jobs' spend (a fifth of the
	// jobs, spending 0.45 USD a run on average): admission meets it
	// mid-campaign with every factory claiming (autoPause then stops the
	// product; the rest wait, held, their reason in /explain).
	ceiling := math.Max(2, math.Round(float64(c.Jobs)/5*0.25*100)/100)
	if err := r.retry(ctx, func() error {
		return call(ctx, r.op, http.MethodPut, "/budgets/"+budgetProduct, budgetProduct,
			map[string]any{"ceilingUsd": ceiling, "period": "total", "autoPause": true}, nil)
	}); err != nil {
		return nil, err
	}
	origins := map[string]string{}
	for _, repo := range []string{repoOf[product], repoOf[budgetProduct]} {
		if origins[repo], err = newOrigin(dir, repo); err != nil {
			return nil, err
		}
	}
	if r.px, err = newProxy(r.st.httpAddr, c.Seed); err != nil {
		return nil, err
	}
	defer r.px.close()
	engine := filepath.Join(dir, "engine.sh")
	if err := os.WriteFile(engine, []byte(engineScript), 0o755); err != nil {
		return nil, err
	}
	runLog := filepath.Join(dir, "runs.log")
	for i := range c.Factories {
		transport := "poll"
		if i%2 == 1 {
			transport = "nats"
		}
		sp := factorySpec{id: fmt.Sprintf("f%02d", i), products: []string{product, budgetProduct}, origins: origins,
			dir: filepath.Join(dir, fmt.Sprintf("f%02d", i)), engine: engine, runLog: runLog,
			url: r.px.URL(), nats: r.st.NATS(), transport: transport, seats: c.Seats}
		var f *factoryProc
		if err := r.retry(ctx, func() error { f, err = newFactory(ctx, r.op, bins.factory, sp); return err }); err != nil {
			return nil, err
		}
		if err := f.start(); err != nil {
			return nil, err
		}
		r.facs = append(r.facs, f)
	}
	defer func() {
		for _, f := range r.facs {
			f.stop()
		}
	}()

	// Faults, the submitter and the operators (reviewer, shipper) run
	// together; faults end after c.Faults.
	faultCtx, stopFaults := context.WithTimeout(ctx, c.Faults)
	defer stopFaults()
	opCtx, stopOps := context.WithCancel(ctx)
	defer stopOps()
	var wg sync.WaitGroup
	r.px.setFaults(true)
	wg.Go(func() { r.processFaults(faultCtx) })
	var ops sync.WaitGroup
	ops.Go(func() { r.watchStoreFaults(opCtx) })
	ops.Go(func() { r.operators(opCtx) })
	submitErr := make(chan error, 1)
	go func() { submitErr <- r.submit(ctx) }()

	<-faultCtx.Done()
	wg.Wait()
	r.px.setFaults(false)
	for _, f := range r.facs { // every factory back: running, not stopped
		if f.running() {
			f.signal(syscall.SIGCONT)
		} else if err := f.start(); err != nil {
			return nil, err
		}
	}
	// Store faults off for the drain: the stack comes back without them.
	r.noteStoreFaults(ctx)
	r.st.env = withoutStoreFaults(r.st.env)
	if err := r.st.restart(ctx); err != nil {
		return nil, fmt.Errorf("restart the stack without store faults: %w", err)
	}
	if err := <-submitErr; err != nil {
		return nil, err
	}
	faultsEnded := time.Now()
	fmt.Fprintf(out, "chaos: faults stopped after %s; draining (up to %s)\n", faultsEnded.Sub(began).Round(time.Second), c.Drain)

	drainCtx, stopDrain := context.WithTimeout(ctx, c.Drain)
	defer stopDrain()
	drained := r.waitTerminal(drainCtx)
	stopOps()
	ops.Wait()
	fmt.Fprintf(out, "chaos: drain %s (all terminal: %v)\n", time.Since(faultsEnded).Round(time.Second), drained)

	rep, err := r.check(ctx, origins, runLog)
	if err != nil {
		return nil, err
	}
	r.faultMu.Lock()
	rep.Faults = r.faults
	r.faultMu.Unlock()
	rep.Faults[faultNetDrop] = r.px.drops.Load()
	rep.Faults[faultNetDelay] = r.px.delays.Load()
	rep.Faults[faultNetReset] = r.px.resets.Load()
	r.storeFaultsMu.Lock()
	rep.Faults[faultStoreError], rep.Faults[faultStoreDelay] = r.storeErrs, r.storeDelay
	r.storeFaultsMu.Unlock()
	r.faultMu.Lock()
	rep.FaultErrs = r.faultErrs
	r.faultMu.Unlock()
	for _, k := range c.kinds() {
		if rep.Faults[k] == 0 {
			rep.Missing = append(rep.Missing, k)
		}
	}
	rep.Wall = time.Since(began)
	rep.print(out)
	return rep, nil
}

// killStrays kills what is left running in the campaign's directory: the
// engines of factories killed with kill -9 are orphaned (as on a real
// machine) and would otherwise outlive the campaign.
func killStrays(dir string) {
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		if cwd, err := os.Readlink(filepath.Join("/proc", e.Name(), "cwd")); err == nil && strings.HasPrefix(cwd, dir+"/") {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

// kinds are the fault kinds the campaign injects with its settings.
func (c campaign) kinds() []string {
	ks := []string{faultNetDrop, faultNetDelay, faultNetReset}
	for _, k := range processKinds {
		ks = append(ks, k.kind)
	}
	if strings.Contains(c.StoreFaults, "errors:") {
		ks = append(ks, faultStoreError)
	}
	if strings.Contains(c.StoreFaults, "latency:") {
		ks = append(ks, faultStoreDelay)
	}
	return ks
}

func withoutStoreFaults(env []string) []string {
	var out []string
	for _, kv := range env {
		if !strings.HasPrefix(kv, "FLEET_STORE_FAULTS=") {
			out = append(out, kv)
		}
	}
	return out
}

// retry calls f until it succeeds, answers a 4xx, or two minutes pass: the
// campaign's own calls go to a stack that is being broken on purpose, so a
// 5xx or a refused connection is expected and the call is made again (the
// submissions carry idempotency keys, so a repeat creates nothing twice).
func (r *runner) retry(ctx context.Context, f func() error) error {
	deadline := time.Now().Add(2 * time.Minute)
	for {
		err := f()
		if st := statusOf(err); err == nil || (st > 0 && st < 500) || ctx.Err() != nil || time.Now().After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// manifest is one job: its title tells the engine what to do.
func (r *runner) manifest(key string, extra ...string) string {
	return r.manifestSpending(key, repoOf[product], 0, 0, extra...)
}

// manifestSpending is a job whose budget.usd is estimate and whose engine
// spends usd (neither when estimate is 0).
func (r *runner) manifestSpending(key, repo string, estimate, usd float64, extra ...string) string {
	kind, ms := "ok", 200+r.intn(2500)
	switch p := r.float(); {
	case p < 0.10:
		kind = "fail"
	case p < 0.14:
		kind = "hang"
	}
	title, budget := fmt.Sprintf("%s %s %d", key, kind, ms), "{wall: 4s}"
	if estimate > 0 {
		title += fmt.Sprintf(" %.2f", usd)
		budget = fmt.Sprintf("{wall: 4s, usd: %.2f}", estimate)
	}
	return fmt.Sprintf("---\ntitle: %s\nrepo: %s\ncapabilities: [engine:fake]\nmaxAttempts: 2\nbudget: %s\nidempotencyKey: %s\n%s---\nChaos job %s.\n",
		title, repo, budget, key, strings.Join(extra, ""), key)
}

// budgeted is a job of the budget-capped product: an estimate between
// 0.20 and 1.00 USD, and a run that spends half to all of it, or (one in
// twenty) half as much again, past its estimate.
func (r *runner) budgeted(key string) string {
	estimate := float64(20+r.intn(81)) / 100
	usd := estimate * (0.5 + 0.5*r.float())
	if r.intn(20) == 0 {
		usd = estimate * 1.5
	}
	return r.manifestSpending(key, repoOf[budgetProduct], estimate, usd)
}

// submit submits c.Jobs jobs over the fault window: one in five to the
// budget-capped product; of the others, one in ten a DAG parent given two
// children, one in ten review-gated.
func (r *runner) submit(ctx context.Context) error {
	spacing := time.Duration(float64(r.c.Faults) * 0.8 / float64(r.c.Jobs))
	n := 0
	for i := 0; n < r.c.Jobs; i++ {
		key := fmt.Sprintf("chaos-%05d", i)
		if i%5 == 4 {
			var job struct {
				ID string `json:"id"`
			}
			m := r.budgeted(key)
			if err := r.retry(ctx, func() error { return call(ctx, r.op, http.MethodPost, "/jobs", budgetProduct, m, &job) }); err != nil {
				return fmt.Errorf("submit %s: %w", key, err)
			}
			r.addIDs(job.ID)
			n++
			if err := sleepCtx(ctx, spacing); err != nil {
				return err
			}
			continue
		}
		var extra []string
		dag := r.intn(10) == 0 && n+3 <= r.c.Jobs
		if r.intn(10) == 0 && !dag {
			extra = append(extra, "review: {reviewers: [alice], quorum: 1}\n")
		}
		var job struct {
			ID string `json:"id"`
		}
		m := r.manifest(key, extra...)
		if err := r.retry(ctx, func() error { return call(ctx, r.op, http.MethodPost, "/jobs", "", m, &job) }); err != nil {
			return fmt.Errorf("submit %s: %w", key, err)
		}
		r.addIDs(job.ID)
		n++
		if dag {
			children := []string{r.manifest(key + "-c1"), r.manifest(key + "-c2")}
			var page struct {
				Items []struct {
					ID string `json:"id"`
				} `json:"items"`
			}
			err := r.retry(ctx, func() error {
				return call(ctx, r.op, http.MethodPost, "/jobs/"+job.ID+"/children", "", map[string]any{"children": children}, &page)
			})
			switch {
			case err == nil:
				for _, it := range page.Items {
					r.addIDs(it.ID)
				}
				n += len(page.Items)
			case statusOf(err) == http.StatusConflict:
				// A factory claimed the parent first: it runs as a plain job.
			default:
				return fmt.Errorf("children of %s: %w", key, err)
			}
		}
		if err := sleepCtx(ctx, spacing); err != nil {
			return err
		}
	}
	return nil
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}

func (r *runner) addIDs(ids ...string) {
	r.idsMu.Lock()
	r.submitted = append(r.submitted, ids...)
	r.idsMu.Unlock()
}

func (r *runner) ids() []string {
	r.idsMu.Lock()
	defer r.idsMu.Unlock()
	return append([]string(nil), r.submitted...)
}

// processKinds are the process faults, in the order of their weights.
var processKinds = []struct {
	kind   string
	weight float64
}{{faultKill9, 0.40}, {faultStop, 0.40}, {faultHandler, 0.15}, {faultStack, 0.05}}

// nextFault picks the n-th process fault: the first ones are every kind
// once, in a random order, so that even a short campaign injects each;
// after that, by weight.
func (r *runner) nextFault(n int, first []string) string {
	if n < len(first) {
		return first[n]
	}
	p := r.float()
	for _, k := range processKinds {
		if p < k.weight {
			return k.kind
		}
		p -= k.weight
	}
	return processKinds[0].kind
}

// faultFailed records a fault the stack did not recover from as it must
// (the emulator not restarting the handler, the stack not coming back).
func (r *runner) faultFailed(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	fmt.Fprintln(r.out, "chaos:", msg)
	r.faultMu.Lock()
	r.faultErrs = append(r.faultErrs, msg)
	r.faultMu.Unlock()
}

// processFaults injects a process fault every FaultEvery on average.
func (r *runner) processFaults(ctx context.Context) {
	var wg sync.WaitGroup
	defer wg.Wait()
	first := make([]string, len(processKinds))
	for i, k := range processKinds {
		first[i] = k.kind
	}
	r.rngMu.Lock()
	r.rng.Shuffle(len(first), func(i, j int) { first[i], first[j] = first[j], first[i] })
	r.rngMu.Unlock()
	for n := 0; ; {
		wait := time.Duration(float64(r.c.FaultEvery) * (0.5 + r.float()))
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		kind := r.nextFault(n, first)
		switch kind {
		case faultKill9:
			f := r.facs[r.intn(len(r.facs))]
			if !f.running() {
				continue
			}
			r.logf("kill -9 %s", f.ID)
			f.kill9()
			down := time.Duration(500+r.intn(4000)) * time.Millisecond
			wg.Go(func() {
				time.Sleep(down)
				if err := f.start(); err != nil {
					r.faultFailed("restart factory %s: %v", f.ID, err)
				}
			})
		case faultStop:
			f := r.facs[r.intn(len(r.facs))]
			if !f.running() {
				continue
			}
			// Sometimes past the lease TTL: the job is reassigned while
			// the stopped holder's engine runs on.
			pause := time.Duration(1000+r.intn(12000)) * time.Millisecond
			r.logf("SIGSTOP %s for %s", f.ID, pause)
			f.signal(syscall.SIGSTOP)
			wg.Go(func() {
				time.Sleep(pause)
				if f.running() {
					f.signal(syscall.SIGCONT)
				}
			})
		case faultHandler:
			pid, err := r.st.handlerPID(ctx)
			if err != nil {
				continue // the stack is restarting
			}
			r.logf("kill -9 handler %d", pid)
			r.noteStoreFaults(ctx)
			if syscall.Kill(pid, syscall.SIGKILL) != nil {
				continue
			}
			// The host emulator must start a new handler process.
			wg.Go(func() { r.awaitHandler(context.WithoutCancel(ctx), pid) })
		case faultStack:
			r.logf("restart the stack")
			r.noteStoreFaults(ctx)
			// Not cut short by the end of the fault window: a stack half
			// started would be left to the drain's restart to find.
			if err := r.st.restart(context.WithoutCancel(ctx)); err != nil {
				r.faultFailed("restart the stack: %v", err)
				return
			}
		}
		r.count(kind)
		n++
	}
}

// awaitHandler waits for the host emulator to replace the handler process
// old that was killed.
func (r *runner) awaitHandler(ctx context.Context, old int) {
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		if pid, err := r.st.handlerPID(ctx); err == nil && pid != old {
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
	r.faultFailed("the handler killed (pid %d) was not restarted within 60s", old)
}

// watchStoreFaults samples the handler's injected-fault counters; they
// start from zero whenever the handler does, so the campaign adds up what
// each handler process reported.
func (r *runner) watchStoreFaults(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Second):
		}
		r.noteStoreFaults(ctx)
	}
}

func (r *runner) noteStoreFaults(ctx context.Context) {
	var m struct {
		Adapters struct {
			StoreFaults *struct {
				Errors int64 `json:"errors"`
				Delays int64 `json:"delays"`
			} `json:"storeFaults"`
		} `json:"adapters"`
	}
	if err := call(ctx, r.op, http.MethodGet, "/metrics", "", nil, &m); err != nil || m.Adapters.StoreFaults == nil {
		return
	}
	r.storeFaultsMu.Lock()
	defer r.storeFaultsMu.Unlock()
	e, d := m.Adapters.StoreFaults.Errors, m.Adapters.StoreFaults.Delays
	if e < r.lastErrs || d < r.lastDelay { // a new handler process
		r.lastErrs, r.lastDelay = 0, 0
	}
	r.storeErrs += e - r.lastErrs
	r.storeDelay += d - r.lastDelay
	r.lastErrs, r.lastDelay = e, d
}

// operators act as people would: alice approves what waits in review (one
// in five she rejects, which sends it back with feedback), and the admin
// ships what waits in testing. (Budget-capped jobs have no gate.)
func (r *runner) operators(ctx context.Context) {
	for ctx.Err() == nil {
		review, _ := r.list(ctx, product, "review")
		for _, j := range review {
			if j.Review == nil || j.Review.Head == "" {
				continue
			}
			approve := r.intn(5) != 0
			_ = call(ctx, r.voter, http.MethodPost, "/jobs/"+j.ID+"/review", "", map[string]any{
				"approve": approve, "head": j.Review.Head, "comment": "chaos review",
			}, nil)
		}
		testing, _ := r.list(ctx, product, "testing")
		for _, j := range testing {
			_ = call(ctx, r.op, http.MethodPost, "/jobs/"+j.ID+"/actions/ship", "", map[string]any{}, nil)
		}
		_ = sleepCtx(ctx, 500*time.Millisecond)
	}
}

type jobView struct {
	ID        string `json:"id"`
	ProductID string `json:"productId"`
	Stage     string `json:"stage"`
	Title     string `json:"title"`
	Review    *struct {
		Head string `json:"head"`
	} `json:"review"`
	Budget struct {
		USD float64 `json:"usd"`
	} `json:"budget"`
	ParentID string   `json:"parentId"`
	Children []string `json:"children"`
	EventSeq int64    `json:"eventSeq"`
}

// list pages through product's jobs in stage ("" for all).
func (r *runner) list(ctx context.Context, product, stage string) ([]jobView, error) {
	var all []jobView
	cursor := ""
	for {
		q := "/jobs?limit=200"
		if stage != "" {
			q += "&stage=" + stage
		}
		if cursor != "" {
			q += "&cursor=" + cursor
		}
		var page struct {
			Items  []jobView `json:"items"`
			Cursor string    `json:"cursor"`
		}
		if err := call(ctx, r.op, http.MethodGet, q, product, nil, &page); err != nil {
			return all, err
		}
		all = append(all, page.Items...)
		if page.Cursor == "" {
			return all, nil
		}
		cursor = page.Cursor
	}
}

// listAll is every job of product, the listing retried whole on errors:
// the check must not take a failed page for missing jobs.
func (r *runner) listAll(ctx context.Context, product string) ([]jobView, error) {
	var jobs []jobView
	err := r.retry(ctx, func() error {
		var err error
		jobs, err = r.list(ctx, product, "")
		return err
	})
	return jobs, err
}

var terminal = map[string]bool{"shipped": true, "failed": true, "dead_letter": true, "cancelled": true}

// waitTerminal waits until every submitted job is terminal, or (a job of
// the budget-capped product) queued and held back by a budget that has
// nothing reserved: spend has used the room, no run is in flight that
// could give some back, so the hold stays.
func (r *runner) waitTerminal(ctx context.Context) bool {
	for {
		if r.settled(ctx) {
			return true
		}
		if sleepCtx(ctx, 2*time.Second) != nil {
			return false
		}
	}
}

func (r *runner) settled(ctx context.Context) bool {
	var jobs, pending []jobView
	for _, p := range []string{product, budgetProduct} {
		js, err := r.list(ctx, p, "")
		if err != nil {
			return false
		}
		jobs = append(jobs, js...)
	}
	for _, j := range jobs {
		if terminal[j.Stage] {
			continue
		}
		if j.ProductID != budgetProduct || j.Stage != string(fleet.StageQueued) {
			return false
		}
		pending = append(pending, j)
	}
	if len(jobs) < len(r.ids()) {
		return false
	}
	if len(pending) == 0 {
		return true
	}
	var b budgetView
	if err := call(ctx, r.op, http.MethodGet, "/budgets/"+budgetProduct, budgetProduct, nil, &b); err != nil || micros(b.ReservedUSD) != 0 {
		return false
	}
	held, err := r.budgetHolds(ctx, pending)
	return err == nil && len(held) == len(pending)
}

// sortedKeys returns m's keys in order.
func sortedKeys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}
