package hostemu

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/gigafactory/fleet/shared/funchost"
)

// StartTimeout is how long the handler has to answer the probe, as on the
// Functions host.
const StartTimeout = 60 * time.Second

// Child runs the custom-handler binary and restarts it when it dies, as the
// host does with a crashed worker.
type Child struct {
	Path string
	Args []string
	Dir  string
	Env  []string
	Log  *slog.Logger

	// pickPort picks the handler's port (freePort; a test's choice).
	pickPort func() (int, error)

	mu       sync.Mutex
	ready    chan struct{} // closed once the current process answers the probe
	addr     string
	pid      int
	restarts atomic.Int64
}

// Restarts counts how often the handler was restarted after dying.
func (c *Child) Restarts() int64 { return c.restarts.Load() }

// PID is the current handler process id (0 when none runs).
func (c *Child) PID() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.pid
}

// Addr waits until a handler process is ready and returns its address.
func (c *Child) Addr(ctx context.Context) (string, error) {
	c.mu.Lock()
	ch := c.ready
	c.mu.Unlock()
	if ch == nil {
		return "", errors.New("handler not started")
	}
	select {
	case <-ch:
	case <-ctx.Done():
		return "", fmt.Errorf("handler not ready: %w", ctx.Err())
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.addr, nil
}

// Run starts the handler and keeps it running until ctx ends, then stops it
// with SIGTERM (SIGKILL after a grace period). It returns an error only when
// the handler cannot be started at all.
func (c *Child) Run(ctx context.Context, started chan<- error) error {
	c.mu.Lock()
	c.ready = make(chan struct{})
	c.mu.Unlock()
	backoff := 500 * time.Millisecond
	first := true
	for {
		cmd, exited, err := c.start(ctx)
		if first {
			if started != nil {
				started <- err
			}
			if err != nil {
				return err
			}
			first = false
		}
		if err != nil {
			c.Log.Error("handler failed to start; retrying", "err", err, "in", backoff)
		} else {
			upSince := time.Now()
			select {
			case <-ctx.Done():
				c.stop(cmd, exited)
				return nil
			case err := <-exited:
				c.mu.Lock()
				c.ready = make(chan struct{})
				c.pid = 0
				c.mu.Unlock()
				c.Log.Error("handler exited unexpectedly; restarting", "err", err, "pid", cmd.Process.Pid, "in", backoff)
				if time.Since(upSince) > 30*time.Second {
					backoff = 500 * time.Millisecond
				}
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, 10*time.Second)
		c.restarts.Add(1)
	}
}

func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// portTries bounds the ports start tries when another process answers on
// the one it picked.
const portTries = 3

// start launches one handler process and waits for its probe. A port that
// another process answers on (another stack's handler took it between the
// pick and the bind) is given up for a fresh one.
func (c *Child) start(ctx context.Context) (*exec.Cmd, <-chan error, error) {
	for try := 1; ; try++ {
		cmd, exited, err := c.startOn(ctx)
		if !errors.Is(err, errPortTaken) || try == portTries {
			return cmd, exited, err
		}
		c.Log.Warn("handler port taken by another process; trying another", "err", err)
	}
}

// errPortTaken: something other than the started handler answered its probe.
var errPortTaken = errors.New("another process answers on the handler's port")

func (c *Child) startOn(ctx context.Context) (*exec.Cmd, <-chan error, error) {
	pick := c.pickPort
	if pick == nil {
		pick = freePort
	}
	port, err := pick()
	if err != nil {
		return nil, nil, err
	}
	probeID := rand.Text()
	cmd := exec.Command(c.Path, c.Args...)
	cmd.Dir = c.Dir
	cmd.Env = append(append(os.Environ(), c.Env...), "FUNCTIONS_CUSTOMHANDLER_PORT="+strconv.Itoa(port), "FUNCTIONS_WORKER_RUNTIME=custom",
		funchost.ProbeIDEnv+"="+probeID)
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	cmd.SysProcAttr = childAttr()
	if err := cmd.Start(); err != nil {
		return nil, nil, fmt.Errorf("start handler %s: %w", c.Path, err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	if err := probe(ctx, addr, probeID, exited); err != nil {
		_ = cmd.Process.Kill()
		return nil, nil, fmt.Errorf("handler %s: %w", c.Path, err)
	}
	c.mu.Lock()
	c.addr, c.pid = addr, cmd.Process.Pid
	close(c.ready)
	c.mu.Unlock()
	c.Log.Info("handler ready", "addr", addr, "pid", cmd.Process.Pid)
	return cmd, exited, nil
}

// probe GETs "/" until the handler answers with probeID, it exits, or the
// start timeout passes. An answer without probeID is another process's (see
// funchost.ProbeIDEnv): the handler is given until it exits, which it does
// when it cannot bind the port.
func probe(ctx context.Context, addr, probeID string, exited <-chan error) error {
	deadline := time.Now().Add(StartTimeout)
	client := &http.Client{Timeout: time.Second}
	foreign := false
	for time.Now().Before(deadline) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/", nil)
		if resp, err := client.Do(req); err == nil {
			resp.Body.Close()
			if resp.Header.Get(funchost.ProbeIDHeader) == probeID {
				return nil
			}
			foreign = true
		}
		select {
		case err := <-exited:
			if foreign {
				return fmt.Errorf("%w (%s): the handler exited: %v", errPortTaken, addr, err)
			}
			return fmt.Errorf("exited before answering the probe: %v", err)
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(25 * time.Millisecond):
		}
	}
	if foreign {
		// Its own answer lacks the id too when the handler binary predates
		// it: say so rather than only time out.
		return fmt.Errorf("only answers without %s on %s within %s: another process holds the port, or the handler binary is older than this emulator (rebuild it: make build)",
			funchost.ProbeIDHeader, addr, StartTimeout)
	}
	return fmt.Errorf("did not answer the probe on %s within %s", addr, StartTimeout)
}

func (c *Child) stop(cmd *exec.Cmd, exited <-chan error) {
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-exited:
	case <-time.After(15 * time.Second):
		_ = cmd.Process.Kill()
		<-exited
	}
	c.mu.Lock()
	c.pid = 0
	c.mu.Unlock()
}
