package app

import (
	"io"
	"log/slog"
	"testing"

	"github.com/gigafactory/fleet/shared/store"

	"github.com/stretchr/testify/require"

	"github.com/gigafactory/fleet/shared/config"
	"github.com/gigafactory/fleet/shared/store/storefault"
)

// TestStoreFaultsSetting: off by default; a bad spec stops start-up naming
// the setting; a valid one puts the injector under the store.
func TestStoreFaultsSetting(t *testing.T) {
	t.Parallel()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	lookup := func(faults string) config.Lookup {
		return testLookup(t, map[string]string{config.StoreFaults: faults})
	}
	isInjected := func(a *App) bool {
		var s store.Store = a.Store
		for {
			switch w := s.(type) {
			case *storefault.Store:
				return true
			case interface{ Unwrap() store.Store }:
				s = w.Unwrap()
			default:
				return false
			}
		}
	}

	a, err := Open(t.Context(), lookup(""), log)
	require.NoError(t, err)
	require.False(t, isInjected(a), "never on by default")
	require.NoError(t, a.Close())

	_, err = Open(t.Context(), lookup("errors:2"), log)
	require.ErrorContains(t, err, "FLEET_STORE_FAULTS")

	a, err = Open(t.Context(), lookup("errors:1"), log)
	require.NoError(t, err)
	require.True(t, isInjected(a))
	_, err = a.Store.Read(t.Context(), store.Jobs, "p", "j")
	require.ErrorIs(t, err, store.ErrUnavailable)
	require.NoError(t, a.Close())
}
