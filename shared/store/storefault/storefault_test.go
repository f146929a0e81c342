package storefault_test

import (
	"context"
	"math/rand/v2"
	"path/filepath"
	"testing"
	"time"

	"github.com/gigafactory/fleet/shared/store"

	"github.com/stretchr/testify/require"

	"github.com/gigafactory/fleet/shared/store/sqlite"
	"github.com/gigafactory/fleet/shared/store/storefault"
	"github.com/gigafactory/fleet/shared/store/storetest"
)

func newSQLite(t *testing.T) store.Store {
	s, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "fleet.db"))
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, s.Close()) })
	return s
}

func TestParse(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		spec string
		want storefault.Config
		err  string
	}{
		{spec: "", want: storefault.Config{}},
		{spec: "off", want: storefault.Config{}},
		{spec: "errors:0.02", want: storefault.Config{ErrorRate: 0.02}},
		{spec: "errors:0.02,latency:0.05:50ms", want: storefault.Config{ErrorRate: 0.02, LatencyRate: 0.05, Latency: 50 * time.Millisecond}},
		{spec: " latency:1:1s ", want: storefault.Config{LatencyRate: 1, Latency: time.Second}},
		{spec: "errors:1.5", err: "must be a number in [0, 1]"},
		{spec: "errors:-0.1", err: "must be a number in [0, 1]"},
		{spec: "errors:x", err: "must be a number in [0, 1]"},
		{spec: "errors", err: "want errors:RATE or latency:RATE:DURATION"},
		{spec: "latency:0.1", err: "want errors:RATE or latency:RATE:DURATION"},
		{spec: "latency:0.1:soon", err: "latency must be a Go duration"},
		{spec: "latency:0.1:2m", err: "latency must be a Go duration"},
		{spec: "errors:0.1,errors:0.2", err: "errors given twice"},
		{spec: "drops:0.1", err: "want errors:RATE or latency:RATE:DURATION"},
	} {
		t.Run(tc.spec, func(t *testing.T) {
			t.Parallel()
			got, err := storefault.Parse(tc.spec)
			if tc.err != "" {
				require.ErrorContains(t, err, tc.err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
		})
	}
}

// With nothing to inject the decorator changes no behaviour.
func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store {
		return storefault.New(newSQLite(t), storefault.Config{}, storefault.Options{})
	})
}

// An injected error is ErrUnavailable and the inner store never sees the
// call: a failed write wrote nothing.
func TestInjectedErrorsWriteNothing(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	inner := newSQLite(t)
	s := storefault.New(inner, storefault.Config{ErrorRate: 1}, storefault.Options{})
	_, err := s.Create(ctx, store.Jobs, "p1", "j1", []byte(`{"id":"j1","productId":"p1"}`))
	require.ErrorIs(t, err, store.ErrUnavailable)
	require.ErrorIs(t, err, storefault.ErrInjected)
	_, err = inner.Read(ctx, store.Jobs, "p1", "j1")
	require.ErrorIs(t, err, store.ErrNotFound)
	_, err = s.Read(ctx, store.Jobs, "p1", "j1")
	require.ErrorIs(t, err, store.ErrUnavailable)
	require.Equal(t, storefault.Counts{Errors: 2, Calls: 2}, s.Snapshot())
}

// A fraction of calls is delayed by the configured latency; the rest pass
// straight through.
func TestLatencyOnAFraction(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	var slept []time.Duration
	s := storefault.New(newSQLite(t), storefault.Config{LatencyRate: 0.25, Latency: 40 * time.Millisecond}, storefault.Options{
		Rand: rand.New(rand.NewPCG(1, 2)),
		Sleep: func(_ context.Context, d time.Duration) error {
			slept = append(slept, d)
			return nil
		},
	})
	const calls = 2000
	for i := 0; i < calls; i++ {
		_, err := s.Read(ctx, store.Jobs, "p1", "missing")
		require.ErrorIs(t, err, store.ErrNotFound)
	}
	got := s.Snapshot()
	require.Equal(t, int64(calls), got.Calls)
	require.Zero(t, got.Errors)
	require.Equal(t, int64(len(slept)), got.Delays)
	require.InDelta(t, calls/4, len(slept), calls/20, "about a quarter delayed")
	for _, d := range slept {
		require.Equal(t, 40*time.Millisecond, d)
	}
}
