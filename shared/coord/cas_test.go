package coord_test

import (
	"testing"

	"github.com/gigafactory/fleet/shared/coord/catalog"

	"github.com/gigafactory/fleet/shared/store"

	"github.com/stretchr/testify/require"

	"github.com/gigafactory/fleet/shared/coord"
	"github.com/gigafactory/fleet/shared/fleet"
)

// TestCASGivesUpWithTypedConflict: a document that loses every CAS gives a
// *coord.ConflictError naming it after the bounded attempts, one type for
// jobs, factories and tokens, and a fleet conflict for clients (409).
func TestCASGivesUpWithTypedConflict(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		kind   string
		arm    func(*hookStore)
		action func(e *env, jobID string) error
	}{
		{"job", "job", func(h *hookStore) {
			h.mu.Lock()
			h.beforeReplace = func(string, string) error { return store.ErrPrecondition }
			h.mu.Unlock()
		}, func(e *env, jobID string) error {
			_, err := e.c.Act(e.ctx, "op", prod, jobID, coord.ActionCancel, "")
			return err
		}},
		{"factory", "factory", func(h *hookStore) {
			h.setBeforeFactoryReplace(func(string, string) error { return store.ErrPrecondition })
		}, func(e *env, _ string) error {
			tok, _ := e.toks.Load("f1")
			_, err := e.c.Heartbeat(e.ctx, tok.(*fleet.Token), catalog.Heartbeat{Capabilities: baseCaps, Repos: []string{repo}, Load: 1})
			return err
		}},
		{"token", "token", func(h *hookStore) {
			h.setBeforeTokenReplace(func(string, string) error { return store.ErrPrecondition })
		}, func(e *env, _ string) error {
			return e.c.RevokeToken(e.ctx, "f1")
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var h *hookStore
			e := newEnv(t, withStore(func(s store.Store) store.Store { h = &hookStore{Store: s}; return h }))
			e.factory("f1")
			j := e.submit()
			tt.arm(h)
			err := tt.action(e, j.ID)
			var ce *coord.ConflictError
			require.ErrorAs(t, err, &ce)
			require.Equal(t, tt.kind, ce.Kind)
			require.Positive(t, ce.Attempts)
			require.ErrorIs(t, err, fleet.ErrConflict)
			var fe *fleet.Error
			require.ErrorAs(t, err, &fe)
			require.Equal(t, fleet.CodeConflict, fe.Code)
		})
	}
}

// TestNotFoundLayers: a missing document is one kind of error whatever the
// use case: a fleet not_found naming it that also matches the store's
// ErrNotFound, for reads and for read-modify-writes alike.
func TestNotFoundLayers(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	tests := []struct {
		name string
		call func() error
		want string
	}{
		{"get job", func() error { _, err := e.c.GetJob(e.ctx, prod, "nope"); return err }, "job nope not found"},
		{"get job across products", func() error { _, err := e.c.GetJob(e.ctx, "", "nope"); return err }, "job nope not found"},
		{"act on job", func() error {
			_, err := e.c.Act(e.ctx, "op", prod, "nope", coord.ActionCancel, "")
			return err
		}, "job nope not found"},
		{"get factory", func() error { _, err := e.c.GetFactory(e.ctx, "nope"); return err }, "factory nope not found"},
		{"deregister factory", func() error { return e.c.Deregister(e.ctx, "nope") }, "factory nope not found"},
		{"get product", func() error { _, err := e.c.GetProduct(e.ctx, "nope"); return err }, "product nope not found"},
	}
	for _, tt := range tests {
		err := tt.call()
		require.ErrorIs(t, err, fleet.ErrNotFound, tt.name)
		require.ErrorIs(t, err, store.ErrNotFound, tt.name)
		require.ErrorContains(t, err, tt.want, tt.name)
	}
}
