package agent

import (
	"context"
	"errors"
	"log/slog"
	"path/filepath"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gigafactory/fleet/infra/factory/internal/caps"
	"github.com/gigafactory/fleet/infra/factory/internal/config"
	"github.com/gigafactory/fleet/infra/factory/internal/gitwt"
	"github.com/gigafactory/fleet/shared/api"
)

// heartbeatAnswers are what the coordinator may answer a heartbeat
// (API.md, the route's OpenAPI errors 400, 404, 409, 413, and every
// route's 401/403/429/503), and whether each says it no longer accepts
// this factory.
var heartbeatAnswers = []struct {
	name    string
	err     error
	refused bool
}{
	{name: "401 token unknown or revoked", err: &api.Error{Status: 401, Code: "unauthenticated"}, refused: true},
	{name: "403 not a factory token", err: &api.Error{Status: 403, Code: "forbidden"}, refused: true},
	{name: "404 factory deregistered", err: &api.Error{Status: 404, Code: "not_found"}, refused: true},
	{name: "400 a report field refused", err: &api.Error{Status: 400, Code: "invalid_argument", Field: "cooldowns"}},
	{name: "409 lost a race to write the factory", err: &api.Error{Status: 409, Code: "conflict"}},
	{name: "413 report too large", err: &api.Error{Status: 413, Code: "too_large"}},
	{name: "429 throttled", err: &api.Error{Status: 429, Code: "throttled"}},
	{name: "503 unavailable", err: &api.Error{Status: 503, Code: "unavailable"}},
	{name: "no answer", err: errors.New("dial tcp: connection refused")},
}

// TestRefusedHeartbeatAtStart: the first heartbeat of Run stops the
// factory (OutcomeError, before any work) exactly when the answer says
// the coordinator no longer accepts this factory; any other failure is
// retried on the cadence while the factory works. Before, Run stopped on
// any 4xx but 429 (a 400 about one field, a 409 lost race, a 413).
func TestRefusedHeartbeatAtStart(t *testing.T) {
	t.Parallel()
	for _, tt := range heartbeatAnswers {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			root := t.TempDir()
			work, base := filepath.Join(root, "work"), filepath.Join(root, "base")
			g, err := gitwt.New(gitwt.Options{WorkDir: work, RepoBase: base})
			require.NoError(t, err)
			coord := &beatingAPI{err: tt.err}
			cfg := config.Config{FactoryID: "f1", Seats: 1, WorkDir: work, RepoBase: base, NoRunCgroups: true,
				Once: true, OnceWait: time.Second, HeartbeatEnabled: true, Heartbeat: 20 * time.Second}
			a := New(Deps{Config: cfg, API: coord, Receiver: &fakeRecv{}, Git: g, Log: slog.New(slog.DiscardHandler)})
			a.detected = &caps.Result{}
			want := OutcomeDone // no message: nothing to do
			if tt.refused {
				want = OutcomeError
			}
			require.Equal(t, want.String(), a.Run(context.Background()).String(), "Run's outcome")
			require.Equal(t, 1, coord.count(), "one heartbeat, at start")
		})
	}
}

// TestRefusedHeartbeatInTheLoop: a periodic heartbeat stops the factory
// (the fatal condition, the loop ended) on the same answers as the first
// one, and only on those; after any other the next interval beats again.
// Before, the loop stopped only on 401 and 403: a deregistered factory
// (404) went on working, warning every beat.
func TestRefusedHeartbeatInTheLoop(t *testing.T) {
	t.Parallel()
	for _, tt := range heartbeatAnswers {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				const every = 20 * time.Second
				coord := &beatingAPI{err: tt.err}
				a, clk := clockAgent(t, config.Config{HeartbeatEnabled: true, Heartbeat: every}, coord)
				ctx, cancel := context.WithCancel(t.Context())
				var loop sync.WaitGroup
				ended := make(chan struct{})
				loop.Go(func() {
					defer close(ended)
					a.heartbeatLoop(ctx)
				})
				defer loop.Wait()
				defer cancel()
				synctest.Wait()
				clk.Advance(every)
				synctest.Wait()
				require.Equal(t, 1, coord.count())
				select {
				case err := <-a.fatal:
					require.True(t, tt.refused, "fatal on an answer that is no refusal: %v", err)
					require.ErrorIs(t, err, tt.err)
					synctest.Wait()
					select {
					case <-ended:
					default:
						t.Fatal("the loop went on after the refusal")
					}
				default:
					require.False(t, tt.refused, "a refusal was not fatal")
					clk.Advance(every)
					synctest.Wait()
					require.Equal(t, 2, coord.count(), "the next interval beats again")
				}
			})
		})
	}
}
