package agent

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gigafactory/fleet/infra/factory/internal/logcap"
	"github.com/gigafactory/fleet/infra/factory/internal/transport"
	"github.com/gigafactory/fleet/shared/api"
	"github.com/gigafactory/fleet/shared/fleet"
)

// shippingCoord is a coordinator that keeps the run's live log as the
// shipper appends it (API.md "Live output": a chunk at an offset already
// stored is taken again, one past the end is a gap).
type shippingCoord struct {
	API
	logMu sync.Mutex
	log   []byte
}

func (c *shippingCoord) AppendLog(_ context.Context, _, _ string, _, off int64, chunk []byte) (api.LogAppended, error) {
	c.logMu.Lock()
	defer c.logMu.Unlock()
	if off > int64(len(c.log)) {
		return api.LogAppended{}, fmt.Errorf("a gap: offset %d past the log's %d bytes", off, len(c.log))
	}
	if end := off + int64(len(chunk)); end > int64(len(c.log)) {
		c.log = append(c.log[:off], chunk...)
	}
	return api.LogAppended{Size: int64(len(c.log))}, nil
}

func (c *shippingCoord) shipped() string {
	c.logMu.Lock()
	defer c.logMu.Unlock()
	return string(c.log)
}

// artifact is the body of the run's artifact name ("" when none was
// uploaded).
func (c *fakeCoord) artifact(name string) string {
	for _, u := range c.uploaded() {
		if u.name == name {
			return u.body
		}
	}
	return ""
}

// TestLiveLogHasTheLastLine: a structured engine whose output ends without
// a newline: the transcript's last line reaches the live log as it reaches
// engine.log, since the transcript renders it before the shipper's final
// flush. The live log is the artifact, byte for byte.
func TestLiveLogHasTheLastLine(t *testing.T) {
	p := newPresetT(t, "unterminated")
	c := &shippingCoord{API: p.coord}
	p.a.api = c
	require.Equal(t, OutcomeDone, p.run(t), "fails: %q", p.coord.fails)
	log := p.coord.artifact(artifactLog)
	require.Contains(t, log, "fake claude: the last words, with no newline\n")
	require.Equal(t, log, c.shipped())
}

// TestEngineLogCapped: a run's output past FLEET_ENGINE_LOG_MAX_BYTES
// (an engine or a ship hook printing without end) neither fails nor stops
// the run; engine.log, uploaded as it is, keeps the output's first bytes,
// one line saying how many were left out, and its last lines, within the
// cap. A failure quotes those last lines. The live log is the file as the
// engine left it: all of it without a hook, and what came before the
// hook's output with one.
func TestEngineLogCapped(t *testing.T) {
	t.Parallel()
	const limit = logcap.MinMax
	for _, tc := range []struct {
		name, engine, hook string
		stage              fleet.Stage
		head, last         string
		// hooked: the hook's output is in the file, not in the live log.
		hooked bool
	}{
		{name: "a runaway engine", engine: `sh -c 'yes the engine goes on | head -n 100000; echo the last words; echo made > made.txt'`,
			stage: fleet.StageShipped, head: "the engine goes on\n", last: "the engine goes on\nthe last words\n"},
		{name: "a runaway engine that fails", engine: `sh -c 'yes the engine goes on | head -n 100000; echo the model gave up; exit 3'`,
			stage: fleet.StageFailed, head: "the engine goes on\n", last: "the engine goes on\nthe model gave up\n"},
		{name: "a runaway ship hook", engine: `sh -c 'echo the engine is brief; echo made > made.txt'`,
			hook:  `sh -c 'yes the hook goes on | head -n 100000; echo the hook is done'`,
			stage: fleet.StageShipped, head: "the engine is brief\nthe hook goes on\n", last: "the hook goes on\nthe hook is done\n", hooked: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			root := t.TempDir()
			repo := newGitRepo(t, root)
			coord := newFakeCoord("j1", "app")
			ship := &shippingCoord{API: coord}
			a := newGitAgent(t, root, repo, ship, tc.engine)
			a.cfg.EngineLogMax, a.cfg.ShipHook = limit, tc.hook
			r := a.handle(context.Background(), transport.Delivery{ID: "claim:j1:1", Claimed: coord.claim()})
			waitRun(t, r, "the run")
			a.jobs.Wait()

			job, _ := coord.GetJob(context.Background(), "p", "j1")
			require.Equal(t, tc.stage, job.Stage, "fails: %q", coord.fails)
			log := coord.artifact(artifactLog)
			require.LessOrEqual(t, len(log), limit)
			require.True(t, strings.HasPrefix(log, tc.head), "the head is kept: %q", log[:min(len(log), 100)])
			require.True(t, strings.HasSuffix(log, tc.last), "the last lines are kept: %q", log[max(0, len(log)-100):])
			require.Regexp(t, `\n\[\d+ bytes of output left out here: this log keeps at most 65536 bytes \(FLEET_ENGINE_LOG_MAX_BYTES\), the first and the last\]\n`, log)
			if tc.stage == fleet.StageFailed {
				require.Len(t, coord.fails, 1)
				require.Contains(t, coord.fails[0], "the model gave up", "the failure quotes the output's end")
			}
			live := ship.shipped()
			if !tc.hooked {
				require.Equal(t, log, live, "the live log is the file")
				return
			}
			require.True(t, strings.HasPrefix(log, live), "the live log is the file up to the hook")
			require.Equal(t, "the engine is brief\n", live)
		})
	}
}

// TestEngineLogCappedPreset: a structured engine's run past the cap keeps
// both its transcript (engine.log) and its raw events
// (engine-events.jsonl) within it, each with its head, one marker line
// and its end (the result), and delivers; the live log is engine.log.
func TestEngineLogCappedPreset(t *testing.T) {
	p := newPresetT(t, "runaway")
	c := &shippingCoord{API: p.coord}
	p.a.api = c
	p.a.cfg.EngineLogMax = logcap.MinMax
	require.Equal(t, OutcomeDone, p.run(t), "fails: %q", p.coord.fails)
	require.Equal(t, 3, p.lastPatch(t).Turns, "the result is parsed whole")
	marker := `\n\[\d+ bytes of output left out here: this log keeps at most 65536 bytes \(FLEET_ENGINE_LOG_MAX_BYTES\), the first and the last\]\n`
	normal, err := os.ReadFile("../engine/stream/testdata/claude/normal.jsonl")
	require.NoError(t, err)
	init, rest, _ := strings.Cut(string(normal), "\n")
	for name, end := range map[string]string{
		artifactLog:    "fake claude goes on\nI will add the greeting file.\n",
		artifactEvents: "fake claude goes on\n" + rest,
	} {
		body := p.coord.artifact(name)
		require.LessOrEqual(t, len(body), logcap.MinMax, name)
		require.Regexp(t, marker, body, name)
		require.Contains(t, body, end, name)
		require.True(t, strings.HasSuffix(body, "\n"), name)
		if name == artifactEvents {
			require.True(t, strings.HasPrefix(body, init+"\nfake claude goes on\n"), name)
			require.True(t, strings.HasSuffix(body, rest), name)
		}
	}
	require.Equal(t, p.coord.artifact(artifactLog), c.shipped())
}
