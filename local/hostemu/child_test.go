package hostemu

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gigafactory/fleet/shared/funchost"
)

// fakeHandlerEnv makes the test binary a custom handler: the funchost
// server on FUNCTIONS_CUSTOMHANDLER_PORT, exiting 1 when it cannot bind.
const fakeHandlerEnv = "FLEET_HOSTEMU_FAKE_HANDLER"

func TestMain(m *testing.M) {
	if os.Getenv(fakeHandlerEnv) != "" {
		ln, err := net.Listen("tcp", "127.0.0.1:"+os.Getenv("FUNCTIONS_CUSTOMHANDLER_PORT"))
		if err != nil {
			os.Exit(1)
		}
		s := funchost.NewServer(nil, "", nil)
		s.AnswerProbeWith(os.Getenv(funchost.ProbeIDEnv))
		_ = http.Serve(ln, s)
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestChildProbeRefusesAnotherHandler: the port picked for the handler is
// answered by another process (another stack's handler, which took it
// between the pick and the bind). Its answer does not make the handler
// ready: the handler, unable to bind, exits, and is started again on
// another port, where its own answer (with the probe id) is the one taken.
// Before, the first answer on the port was taken and the stack sent its
// requests to the other stack's handler (a 401 in a parallel test).
func TestChildProbeRefusesAnotherHandler(t *testing.T) {
	t.Parallel()
	other, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = other.Close() })
	go func() {
		_ = http.Serve(other, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) }))
	}()
	taken := other.Addr().(*net.TCPAddr).Port

	picks := 0
	c := &Child{Path: os.Args[0], Env: []string{fakeHandlerEnv + "=1"}, Log: slog.New(slog.DiscardHandler),
		pickPort: func() (int, error) {
			picks++
			if picks == 1 {
				return taken, nil
			}
			return freePort()
		}}
	ctx, cancel := context.WithCancel(context.Background())
	started := make(chan error, 1)
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx, started) }()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done)
	})
	require.NoError(t, <-started)

	rctx, rcancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer rcancel()
	addr, err := c.Addr(rctx)
	require.NoError(t, err)
	require.NotEqual(t, net.JoinHostPort("127.0.0.1", strconv.Itoa(taken)), addr, "the other process's answer was taken")
	// At least one more pick: on a busy machine another stack may take
	// the second port too, and a third is tried.
	require.GreaterOrEqual(t, picks, 2)
	require.NotZero(t, c.PID())
}
