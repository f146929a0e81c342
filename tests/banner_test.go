package tests

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestAuthzBannerPrintsOnlyAGeneratedToken (issue 23 item 9): the local
// stack's start-up banner shows an operator token only when it generated
// it; tokens from FLEET_OPERATOR_TOKEN, the unscoped one above all, are
// named, never printed.
func TestAuthzBannerPrintsOnlyAGeneratedToken(t *testing.T) {
	t.Parallel()
	t.Run("configured", func(t *testing.T) {
		t.Parallel()
		admin, scoped := randomToken("adm_"), randomToken("scp_")
		s := startStack(t, "FLEET_OPERATOR_TOKEN=admin:"+admin+",scoped:"+scoped+":other")
		out := s.out.String()
		require.NotContains(t, out, admin, "the unscoped token is printed")
		require.NotContains(t, out, scoped, "a scoped token is printed")
		require.Contains(t, out, "fleet: operator tokens from FLEET_OPERATOR_TOKEN: admin, scoped (not printed)")
	})
	t.Run("generated", func(t *testing.T) {
		t.Parallel()
		s := startStack(t, "FLEET_OPERATOR_TOKEN=")
		require.NotEmpty(t, s.Token)
		require.Contains(t, s.out.String(), "fleet: operator token ("+s.DataDir+"/operator-token): "+s.Token)
	})
}
