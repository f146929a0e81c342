package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"

	"github.com/gigafactory/fleet/infra/factory/internal/engine/stream"
	"github.com/gigafactory/fleet/shared/api"
	"github.com/gigafactory/fleet/shared/fleet"
)

// errUSDBudget stops an engine whose reported usage passed the job's
// budget.usd, as errBudget does at the wall budget.
var errUSDBudget = errors.New("usd budget exhausted")

// maxUsageFile bounds what is read of the usage file: it holds three numbers.
const maxUsageFile = 64 << 10

// usageFile is the file engines may write their usage to
// ($FLEET_JOB_USAGE_FILE): in the job directory, outside the worktree,
// so it is never committed.
func (jb *job) usagePath() string { return filepath.Join(jb.dir, "usage.json") }

// usageMeter reads the engine's usage file and reports what changed.
type usageMeter struct {
	mu            sync.Mutex
	last          fleet.Usage
	reported      fleet.Usage
	reportedFacts fleet.EngineFacts
	seen          bool
}

// read returns the usage the file holds now, merged (by maximum) with
// what it held before: the figures are cumulative, so a half-written or
// missing file never lowers them. ok is false while nothing was read.
func (m *usageMeter) read(path string) (fleet.Usage, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	u, err := readUsageFile(path)
	if err == nil && u != nil {
		m.last, m.seen = m.last.Max(*u), true
	}
	return m.last, m.seen, err
}

// readUsageFile parses the usage file: JSON {usd, inputTokens,
// outputTokens}, other fields ignored (an engine may copy more from its
// CLI's output). nil without error when the file is absent or empty.
func readUsageFile(path string) (*fleet.Usage, error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b := make([]byte, maxUsageFile)
	n, _ := f.Read(b)
	b = b[:n]
	if len(b) == 0 {
		return nil, nil
	}
	var u fleet.Usage
	if err := json.Unmarshal(b, &u); err != nil {
		return nil, fmt.Errorf("usage file %s: %w", path, err)
	}
	if err := u.Validate(""); err != nil {
		return nil, fmt.Errorf("usage file %s: %w", path, err)
	}
	return &u, nil
}

// createUsageFile makes the (empty) usage file, the engine's to write.
func (jb *job) createUsageFile() error {
	path := jb.usagePath()
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		return err
	}
	if jb.user != nil {
		return os.Chown(path, int(jb.user.UID), int(jb.user.GID))
	}
	return nil
}

// current is the run's usage and engine facts so far: for a structured
// engine what its output said, raised field by field by the usage file
// when the engine wrote one; for any other the usage file. The file is the
// engine's to write (and a prompt-injected engine's), so it may add what
// the stream does not know but never lower the CLI's own figures, which
// the budget.usd kill and the coordinator's cost rely on. ok is false
// while neither said anything of the usage.
func (jb *job) current(ctx context.Context) (u fleet.Usage, facts fleet.EngineFacts, ok bool) {
	if jb.dir == "" {
		return u, facts, false
	}
	u, ok, err := jb.usage.read(jb.usagePath())
	if err != nil {
		jb.log.WarnContext(ctx, "usage file not read", "err", err)
	}
	if jb.out != nil {
		f := jb.out.Facts()
		facts = reportableFacts(f)
		if f.Events > 0 {
			u, ok = u.Max(streamUsage(f.Usage)), true
		}
		if jb.activity != nil {
			facts.LastActivityAt = jb.activity.Last()
		}
	}
	facts.Exit = jb.exit
	return u, facts, ok
}

// streamUsage is a structured engine's usage as the fleet records it.
func streamUsage(s stream.Usage) fleet.Usage {
	return fleet.Usage{USD: s.USD, InputTokens: s.InputTokens, OutputTokens: s.OutputTokens,
		CacheReadTokens: s.CacheReadTokens, CacheWriteTokens: s.CacheWriteTokens}
}

// reportableFacts are the facts of f the coordinator accepts: a session
// or model it would refuse (not a plain token) is left out rather than
// have the whole report refused.
func reportableFacts(f stream.Facts) fleet.EngineFacts {
	facts := fleet.EngineFacts{Turns: f.Turns}
	if (fleet.EngineFacts{Session: f.Session}).Validate() == nil {
		facts.Session = f.Session
	}
	if (fleet.EngineFacts{Model: f.Model}).Validate() == nil {
		facts.Model = f.Model
	}
	return facts
}

// meterUsage reports the run's usage and engine facts when they changed,
// and says whether the usage passed the job's budget.usd. Best effort: a
// failed report is sent again at the next reading (reports are
// cumulative).
func (jb *job) meterUsage(ctx context.Context) (over bool) {
	u, facts, ok := jb.current(ctx)
	if !ok && jb.out == nil {
		// A template engine's facts ride on the final report only.
		return false
	}
	jb.usage.mu.Lock()
	changed := u != jb.usage.reported || facts != jb.usage.reportedFacts
	jb.usage.mu.Unlock()
	if changed {
		if err := jb.reportUsage(ctx, jb.engine, u, facts); err != nil {
			jb.log.WarnContext(ctx, "usage report", "err", err)
		} else {
			jb.usage.mu.Lock()
			jb.usage.reported, jb.usage.reportedFacts = u, facts
			jb.usage.mu.Unlock()
		}
	}
	return jb.j.Budget.USD > 0 && u.USD > jb.usdLeft()
}

// usdLeft is what this run may spend of the job's budget.usd: all of it,
// except on an iteration its pull request asked for, where the earlier
// iterations' runs spent from the same budget (API.md "Pull requests": the
// budget spans all iterations), so a review loop cannot spend without end.
func (jb *job) usdLeft() float64 {
	left := jb.j.Budget.USD
	if jb.j.Iteration >= 2 {
		for _, r := range jb.j.Runs {
			left -= r.Usage.USD
		}
	}
	return left
}

// finalUsage is the usage to carry on the run's last report (the
// delivering patch, the failure), nil when there is none, and the engine
// facts.
func (jb *job) finalUsage() (*fleet.Usage, fleet.EngineFacts) {
	u, facts, ok := jb.current(jb.ctx)
	if !ok {
		return nil, facts
	}
	return &u, facts
}

// reportUsage sends the run's cumulative usage, the engine running it and
// what the engine said of the run.
func (jb *job) reportUsage(ctx context.Context, engine string, u fleet.Usage, facts fleet.EngineFacts) error {
	_, err := jb.a.api.ReportUsage(ctx, jb.j.ProductID, jb.j.ID, api.UsageRequest{LeaseEpoch: &jb.cl.LeaseEpoch, USD: &u.USD,
		InputTokens: &u.InputTokens, OutputTokens: &u.OutputTokens, CacheReadTokens: &u.CacheReadTokens,
		CacheWriteTokens: &u.CacheWriteTokens, Engine: engine, EngineFacts: facts})
	return err
}
