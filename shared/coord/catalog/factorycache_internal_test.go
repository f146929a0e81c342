package catalog

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gigafactory/fleet/shared/fleet"
)

// TestRefreshTakesWritesMadeWhileItRead: a refresh's list takes the copy of
// a factory this process wrote while it read, unless it read that write or
// a later one (another process's); a write made while no refresh read is
// not kept for a later one, which reads it from the store.
func TestRefreshTakesWritesMadeWhileItRead(t *testing.T) {
	t.Parallel()
	t0 := time.Unix(1000, 0)
	at := func(id string, d time.Duration, draining bool) *fleet.Factory {
		return &fleet.Factory{ID: id, UpdatedAt: t0.Add(d), Draining: draining}
	}
	for _, tt := range []struct {
		name     string
		read     *fleet.Factory
		written  *fleet.Factory // nil: none while it read
		draining bool
	}{
		{"written after the read", at("f1", 0, false), at("f1", time.Second, true), true},
		{"read the write itself", at("f1", time.Second, true), at("f1", time.Second, true), true},
		{"read a later write", at("f1", 2*time.Second, false), at("f1", time.Second, true), false},
		{"nothing written", at("f1", 0, false), nil, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			fc := newFactoryCache(time.Second, time.Minute)
			fc.factories = []*fleet.Factory{at("f1", 0, false), at("f2", 0, false)}
			fc.mu.Lock()
			fc.beginRefresh()
			fc.mu.Unlock()
			if tt.written != nil {
				fc.update(tt.written)
			}
			fc.mu.Lock()
			fs := fc.withWritten([]*fleet.Factory{tt.read, at("f2", 0, false)})
			fc.mu.Unlock()
			require.Len(t, fs, 2)
			require.Equal(t, tt.draining, fs[0].Draining)
			require.False(t, fs[1].Draining)
		})
	}

	// No refresh under way: nothing is held for the next one.
	fc := newFactoryCache(time.Second, time.Minute)
	fc.factories = []*fleet.Factory{at("f1", 0, false)}
	fc.update(at("f1", time.Second, true))
	require.Nil(t, fc.written)
	require.True(t, fc.factories[0].Draining, "the list itself is patched")
}
