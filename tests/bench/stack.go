package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/gigafactory/fleet/tests/internal/tail"
)

// findRoot returns dir, or the nearest directory upward holding host.json
// and go.mod: the repository root `make bench` runs from.
func findRoot(dir string) (string, error) {
	if dir != "" {
		return filepath.Abs(dir)
	}
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
			return "", errors.New("no host.json and go.mod here or above; run from the repository or pass -root")
		}
		cur = parent
	}
}

func isFile(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.Mode().IsRegular()
}

// buildBinaries builds the handler and the local stack into dir.
func buildBinaries(ctx context.Context, root, dir string) (handler, local string, err error) {
	handler, local = filepath.Join(dir, "handler"), filepath.Join(dir, "fleet-local")
	for out, pkg := range map[string]string{handler: "./functions", local: "./local"} {
		cmd := exec.CommandContext(ctx, "go", "build", "-o", out, pkg)
		cmd.Dir = root
		if b, err := cmd.CombinedOutput(); err != nil {
			return "", "", fmt.Errorf("go build %s: %w\n%s", pkg, err, b)
		}
	}
	return handler, local, nil
}

// stack is a running local stack: fleet-local (the Functions host emulator,
// the SQLite store and the embedded NATS server) driving the handler binary,
// listening on loopback ports it picked itself.
type stack struct {
	URL     string // http://127.0.0.1:port, the emulator's HTTP front
	NATS    string // nats://127.0.0.1:port, the embedded server
	Token   string // the operator token the stack generated
	DataDir string

	cmd      *exec.Cmd
	log      *tail.Buffer
	exited   chan struct{} // closed once the process has ended
	exitErr  error         // set before exited is closed
	stopping atomic.Bool
}

var (
	listeningLine = regexp.MustCompile(`listening on (http://127\.0\.0\.1:[0-9]+)`)
	natsLine      = regexp.MustCompile(`dispatch on NATS at (nats://127\.0\.0\.1:[0-9]+)`)
)

// readyLine ends the stack's start-up banner.
const readyLine = "Ctrl-C stops"

// stackEnv is the environment of the stack: this process's, without any
// fleet, Cosmos DB or Service Bus setting (the run uses the defaults), plus
// loopback ports picked by the kernel, the data directory and the NATS bus.
func stackEnv(dataDir string) []string {
	var env []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(name, "FLEET_") || strings.HasPrefix(name, "CosmosDB__") || strings.HasPrefix(name, "ServiceBus__") {
			continue
		}
		env = append(env, kv)
	}
	return append(env,
		"FLEET_DATA_DIR="+dataDir,
		"FLEET_LISTEN=127.0.0.1:0",
		"FLEET_NATS_LISTEN=127.0.0.1:0",
		"FLEET_BUS=nats",
	)
}

// startStack starts fleet-local with a fresh data directory and waits for its
// banner.
func startStack(ctx context.Context, root, handler, local, dataDir string, env ...string) (*stack, error) {
	s := &stack{DataDir: dataDir, log: &tail.Buffer{Max: 64 << 10}, exited: make(chan struct{})}
	s.cmd = exec.Command(local, "-root", root, "-handler", handler)
	s.cmd.Env = append(stackEnv(dataDir), env...)
	s.cmd.Stderr = s.log
	stdout, err := s.cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := s.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", local, err)
	}
	ready := make(chan struct{})
	var urlOnce, natsOnce sync.Once
	go func() {
		// Read to the end, so the stack never blocks on a full pipe, and
		// only then Wait, as exec requires.
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		readyOnce := sync.Once{}
		for sc.Scan() {
			line := sc.Text()
			_, _ = s.log.Write([]byte(line + "\n"))
			if m := listeningLine.FindStringSubmatch(line); m != nil {
				urlOnce.Do(func() { s.URL = m[1] })
			}
			if m := natsLine.FindStringSubmatch(line); m != nil {
				natsOnce.Do(func() { s.NATS = m[1] })
			}
			if strings.Contains(line, readyLine) {
				readyOnce.Do(func() { close(ready) })
			}
		}
		_, _ = io.Copy(io.Discard, stdout)
		s.exitErr = s.cmd.Wait()
		close(s.exited)
	}()

	timeout := time.NewTimer(60 * time.Second)
	defer timeout.Stop()
	select {
	case <-ready:
	case <-s.exited:
		return nil, fmt.Errorf("the stack exited during start-up (%v); output:\n%s", s.exitErr, s.log)
	case <-timeout.C:
		s.stop()
		return nil, fmt.Errorf("the stack did not start within 60s; output:\n%s", s.log)
	case <-ctx.Done():
		s.stop()
		return nil, context.Cause(ctx)
	}
	if s.URL == "" || s.NATS == "" {
		s.stop()
		return nil, fmt.Errorf("the stack announced no loopback HTTP address or NATS server; output:\n%s", s.log)
	}
	tok, err := os.ReadFile(filepath.Join(dataDir, "operator-token"))
	if err != nil {
		s.stop()
		return nil, fmt.Errorf("read the generated operator token: %w", err)
	}
	s.Token = strings.TrimSpace(string(tok))
	return s, nil
}

// watch calls fail when the stack ends by itself, until ctx ends.
func (s *stack) watch(ctx context.Context, fail func(error)) {
	go func() {
		select {
		case <-s.exited:
			if !s.stopping.Load() {
				fail(fmt.Errorf("the stack exited during the run (%v); output:\n%s", s.exitErr, s.log))
			}
		case <-ctx.Done():
		}
	}()
}

// stop ends the stack as Ctrl-C does and waits for it; after 30s it kills
// it. It returns an error when the stack did not stop cleanly.
func (s *stack) stop() error {
	if !s.stopping.CompareAndSwap(false, true) {
		<-s.exited
		return nil
	}
	select {
	case <-s.exited:
		return fmt.Errorf("the stack had already exited (%v)", s.exitErr)
	default:
	}
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	timeout := time.NewTimer(30 * time.Second)
	defer timeout.Stop()
	select {
	case <-s.exited:
		if s.exitErr != nil {
			return fmt.Errorf("the stack stopped with %v; output:\n%s", s.exitErr, s.log)
		}
		return nil
	case <-timeout.C:
		_ = s.cmd.Process.Kill()
		<-s.exited
		return fmt.Errorf("the stack did not stop within 30s of SIGTERM; output:\n%s", s.log)
	}
}
