package app

import (
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/gigafactory/fleet/shared/coord/echo"

	"github.com/stretchr/testify/require"

	"github.com/gigafactory/fleet/shared/config"
)

// TestEchoSettings: the tracker echo's lane, breaker and webhook settings
// reach the coordinator, and a bad one stops start-up naming it.
func TestEchoSettings(t *testing.T) {
	t.Parallel()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	a, err := Open(t.Context(), testLookup(t, nil), log)
	require.NoError(t, err)
	cfg := a.Coord.Config()
	require.Equal(t, echo.DefaultParallel, cfg.EchoParallel)
	require.Equal(t, echo.DefaultBreakerFailures, cfg.EchoBreakerFailures)
	require.Equal(t, echo.DefaultBreakerCooldown, cfg.EchoBreakerCooldown)
	require.NoError(t, a.Close())

	a, err = Open(t.Context(), testLookup(t, map[string]string{config.EchoParallel: "2", config.EchoBreakerFails: "7", config.EchoBreakerCool: "1m",
		config.WebhookAllowCIDRs: "10.20.0.0/16,fd12::/48"}), log)
	require.NoError(t, err)
	cfg = a.Coord.Config()
	require.Equal(t, 2, cfg.EchoParallel)
	require.Equal(t, 7, cfg.EchoBreakerFailures)
	require.Equal(t, time.Minute, cfg.EchoBreakerCooldown)
	require.NoError(t, a.Close())

	for name, bad := range map[string]string{
		config.WebhookAllowCIDRs: "10.0.0.0/33", config.EchoParallel: "0", config.EchoBreakerFails: "many",
		config.EchoBreakerCool: "soon", config.EchoDialTimeout: "-1s", config.EchoTLSTimeout: "x", config.EchoHeaderTimeout: "0s",
	} {
		_, err := Open(t.Context(), testLookup(t, map[string]string{name: bad}), log)
		require.ErrorContains(t, err, name, bad)
	}
}
