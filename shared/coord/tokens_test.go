package coord_test

import (
	"encoding/json"
	"testing"

	"github.com/gigafactory/fleet/shared/coord/catalog"

	"github.com/gigafactory/fleet/shared/store"

	"github.com/stretchr/testify/require"

	"github.com/gigafactory/fleet/shared/fleet"
)

// tokensOf reads every stored token of factory id.
func (e *env) tokensOf(id string) []fleet.Token {
	e.t.Helper()
	page, err := e.raw.Query(e.ctx, store.Tokens, store.Query{Where: []store.Cond{store.Eq("factoryId", id)}})
	require.NoError(e.t, err)
	require.Empty(e.t, page.Continuation)
	out := make([]fleet.Token, 0, len(page.Items))
	for _, it := range page.Items {
		var t fleet.Token
		require.NoError(e.t, json.Unmarshal(it.Body, &t))
		out = append(out, t)
	}
	return out
}

// TestDeregisterRacingRotate: a rotation that lands after deregister read
// the factory (so deregister only knew the old token) still leaves no
// live token behind: every token of the factory ends revoked and none
// authenticates.
func TestDeregisterRacingRotate(t *testing.T) {
	t.Parallel()
	e, hs := hookedEnv(t)
	_, secret, err := e.c.Enroll(e.ctx, catalog.EnrollRequest{FactoryID: "f1", Capabilities: baseCaps})
	require.NoError(t, err)
	var rotated string
	hs.setAfterFactoryRead(once(func(_, _ string) error {
		var err error
		rotated, err = e.c.RotateToken(e.ctx, "f1")
		return err
	}))
	require.NoError(t, e.c.Deregister(e.ctx, "f1"))
	require.NotEmpty(t, rotated, "the rotation ran inside the deregister")

	toks := e.tokensOf("f1")
	require.Len(t, toks, 2)
	for _, tk := range toks {
		require.True(t, tk.Revoked, "token %s of a deregistered factory is not revoked", tk.ID)
	}
	for _, s := range []string{secret, rotated} {
		_, err := e.peer().AuthenticateFactory(e.ctx, s)
		require.ErrorIs(t, err, catalog.ErrUnauthenticated)
	}
}

// TestAuthenticationNeedsLiveFactory: a token whose factory is gone (its
// document deleted while the revocation failed, or the id enrolled again
// with a new token) does not authenticate, in any process.
func TestAuthenticationNeedsLiveFactory(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	_, secret, err := e.c.Enroll(e.ctx, catalog.EnrollRequest{FactoryID: "f1", Capabilities: baseCaps})
	require.NoError(t, err)
	_, err = e.c.AuthenticateFactory(e.ctx, secret)
	require.NoError(t, err)

	// The factory document goes, its token stays unrevoked.
	require.NoError(t, e.raw.Delete(e.ctx, store.Factories, "f1", "f1", ""))
	_, err = e.peer().AuthenticateFactory(e.ctx, secret)
	require.ErrorIs(t, err, catalog.ErrUnauthenticated, "the factory is gone")

	// The id is enrolled again: the old token is not the new factory's.
	_, fresh, err := e.c.Enroll(e.ctx, catalog.EnrollRequest{FactoryID: "f1", Capabilities: baseCaps})
	require.NoError(t, err)
	_, err = e.peer().AuthenticateFactory(e.ctx, secret)
	require.ErrorIs(t, err, catalog.ErrUnauthenticated, "a token of an earlier enrollment")
	tok, err := e.peer().AuthenticateFactory(e.ctx, fresh)
	require.NoError(t, err)
	require.Equal(t, "f1", tok.FactoryID)
}

// TestRevocationImmediateDespiteInFlightLookup: a lookup that reads the
// token while the revocation is being written cannot put it back in the
// cache: once RevokeToken returns, the token fails in this process.
func TestRevocationImmediateDespiteInFlightLookup(t *testing.T) {
	t.Parallel()
	for _, op := range []string{"revoke", "rotate", "deregister"} {
		t.Run(op, func(t *testing.T) {
			t.Parallel()
			e, hs := hookedEnv(t)
			_, secret, err := e.c.Enroll(e.ctx, catalog.EnrollRequest{FactoryID: "f1", Capabilities: baseCaps})
			require.NoError(t, err)
			hs.setBeforeTokenReplace(once(func(_, _ string) error {
				// In flight: reads the token before the revocation lands
				// (after a rotation's switch or a deregistration it fails
				// anyway; a plain revocation leaves it readable).
				_, _ = e.c.AuthenticateFactory(e.ctx, secret)
				return nil
			}))
			switch op {
			case "revoke":
				require.NoError(t, e.c.RevokeToken(e.ctx, "f1"))
			case "rotate":
				_, err = e.c.RotateToken(e.ctx, "f1")
				require.NoError(t, err)
			case "deregister":
				require.NoError(t, e.c.Deregister(e.ctx, "f1"))
			}
			_, err = e.c.AuthenticateFactory(e.ctx, secret)
			require.ErrorIs(t, err, catalog.ErrUnauthenticated, "revoked at once where it happened")
		})
	}
}
