package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/gigafactory/fleet/tests/internal/tail"
)

// findRoot returns the nearest directory upward holding host.json and go.mod.
func findRoot() (string, error) {
	cur, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if isFile(filepath.Join(cur, "host.json")) && isFile(filepath.Join(cur, "go.mod")) {
			return cur, nil
		}
		parent := filepath.Dir(cur)
		if parent == cur {
			return "", errors.New("no host.json and go.mod here or above; run from the repository")
		}
		cur = parent
	}
}

func isFile(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.Mode().IsRegular()
}

// binaries are the programs the campaign runs.
type binaries struct{ handler, local, factory string }

func build(ctx context.Context, root, dir string) (binaries, error) {
	b := binaries{filepath.Join(dir, "handler"), filepath.Join(dir, "fleet-local"), filepath.Join(dir, "factory")}
	for out, pkg := range map[string]string{b.handler: "./functions", b.local: "./local", b.factory: "./infra/factory"} {
		cmd := exec.CommandContext(ctx, "go", "build", "-o", out, pkg)
		cmd.Dir = root
		if o, err := cmd.CombinedOutput(); err != nil {
			return b, fmt.Errorf("go build %s: %w\n%s", pkg, err, o)
		}
	}
	return b, nil
}

// freePort is a loopback TCP port free right now.
func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// stack is the local stack on fixed loopback ports, so that it can be
// restarted (the broker with it: the NATS server is embedded in
// fleet-local) and come back where factories and the proxy expect it.
type stack struct {
	root               string
	bins               binaries
	env                []string
	httpAddr, natsAddr string
	Token              string
	DataDir            string
	log                *tail.Buffer

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
}

const readyLine = "Ctrl-C stops"

func newStack(root string, bins binaries, dataDir string, extraEnv []string) (*stack, error) {
	hp, err := freePort()
	if err != nil {
		return nil, err
	}
	np, err := freePort()
	if err != nil {
		return nil, err
	}
	s := &stack{root: root, bins: bins, DataDir: dataDir, log: &tail.Buffer{Max: 256 << 10},
		httpAddr: fmt.Sprintf("127.0.0.1:%d", hp), natsAddr: fmt.Sprintf("127.0.0.1:%d", np)}
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(name, "FLEET_") || strings.HasPrefix(name, "CosmosDB__") || strings.HasPrefix(name, "ServiceBus__") {
			continue
		}
		s.env = append(s.env, kv)
	}
	s.env = append(s.env, "FLEET_DATA_DIR="+dataDir, "FLEET_LISTEN="+s.httpAddr, "FLEET_NATS_LISTEN="+s.natsAddr,
		"FLEET_BUS=nats", "FLEET_LOG_LEVEL=warn")
	s.env = append(s.env, extraEnv...)
	return s, nil
}

func (s *stack) URL() string  { return "http://" + s.httpAddr }
func (s *stack) NATS() string { return "nats://" + s.natsAddr }

// start starts fleet-local and waits for its banner.
func (s *stack) start(ctx context.Context) error {
	cmd := exec.Command(s.bins.local, "-root", s.root, "-handler", s.bins.handler)
	cmd.Env = s.env
	// Its own process group: stopping the stack must not signal the
	// campaign (fleet-local ends its children by group).
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Stderr = s.log
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	done := make(chan struct{})
	ready := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		once := sync.Once{}
		for sc.Scan() {
			line := sc.Text()
			_, _ = s.log.Write([]byte(line + "\n"))
			if strings.Contains(line, readyLine) {
				once.Do(func() { close(ready) })
			}
		}
		_, _ = io.Copy(io.Discard, stdout)
		_ = cmd.Wait()
		close(done)
	}()
	s.mu.Lock()
	s.cmd, s.done = cmd, done
	s.mu.Unlock()
	select {
	case <-ready:
	case <-done:
		return fmt.Errorf("the stack exited during start-up; output:\n%s", s.log)
	case <-time.After(90 * time.Second):
		return fmt.Errorf("the stack did not start within 90s; output:\n%s", s.log)
	case <-ctx.Done():
		return ctx.Err()
	}
	return nil
}

// restart stops the stack as Ctrl-C does (SIGKILL after 30s) and starts it
// again on the same ports and data directory.
func (s *stack) restart(ctx context.Context) error {
	s.stop()
	return s.start(ctx)
}

func (s *stack) stop() {
	s.mu.Lock()
	cmd, done := s.cmd, s.done
	s.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		<-done
	}
}

// handlerPID asks the host emulator which process runs the handler.
func (s *stack) handlerPID(ctx context.Context) (int, error) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, s.URL()+"/admin/host/status", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	var st struct {
		Handler struct {
			PID int `json:"pid"`
		} `json:"handler"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		return 0, err
	}
	if st.Handler.PID == 0 {
		return 0, errors.New("no handler running")
	}
	return st.Handler.PID, nil
}
