// Package tests holds black-box tests: they build the real binaries, start
// the local stack (the host emulator driving the handler, as `make run`
// does) on a free port with its own data directory, and drive it over HTTP.
package tests

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	neturl "net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gigafactory/fleet/shared/syncbuf"
)

// repoRoot is the repository root, one level up from tests/.
var repoRoot = func() string {
	wd, err := os.Getwd()
	if err != nil {
		panic(err)
	}
	return filepath.Dir(wd)
}()

var (
	buildOnce sync.Once
	binDir    string
	buildErr  error
)

// binaries builds the handler and the local stack once per test run.
func binaries(t *testing.T) (handler, local string) {
	t.Helper()
	buildOnce.Do(func() {
		binDir, buildErr = os.MkdirTemp("", "fleet-bins-")
		if buildErr != nil {
			return
		}
		for name, pkg := range map[string]string{"handler": "./functions", "fleet-local": "./local"} {
			cmd := exec.Command("go", "build", "-o", filepath.Join(binDir, name), pkg)
			cmd.Dir = repoRoot
			if out, err := cmd.CombinedOutput(); err != nil {
				buildErr = fmt.Errorf("go build %s: %v\n%s", pkg, err, out)
				return
			}
		}
	})
	require.NoError(t, buildErr)
	return filepath.Join(binDir, "handler"), filepath.Join(binDir, "fleet-local")
}

// Stack is a running local stack.
type Stack struct {
	t       *testing.T
	URL     string // http://host:port
	API     string // URL + /api/fleet
	Token   string // operator token
	NATS    string // the embedded NATS server's URL, when the bus is on
	DataDir string
	cmd     *exec.Cmd
	out     *syncbuf.Buffer
}

func randomToken(prefix string) string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}

var (
	listeningLine = regexp.MustCompile(`listening on http://([0-9.:]+)`)
	natsLine      = regexp.MustCompile(`dispatch on NATS at (nats://[0-9.:]+)`)
)

// readyLine ends the stack's start-up banner.
const readyLine = "Ctrl-C stops"

// startStack starts the local stack with env (NAME=value) added; the stack
// is stopped when the test ends.
func startStack(t *testing.T, env ...string) *Stack {
	t.Helper()
	handler, local := binaries(t)
	s := &Stack{t: t, Token: randomToken("op_"), DataDir: t.TempDir(), out: &syncbuf.Buffer{}}
	s.cmd = exec.Command(local, "-root", repoRoot, "-handler", handler)
	dieWithTests(s.cmd, syscall.SIGTERM)
	s.cmd.Env = append(os.Environ(),
		"FLEET_LISTEN=127.0.0.1:0",
		"FLEET_DATA_DIR="+s.DataDir,
		"FLEET_OPERATOR_TOKEN="+s.Token,
		"FLEET_BUS=none",
		"FLEET_NATS_LISTEN=127.0.0.1:0",
		"FLEET_LOG_LEVEL=warn",
	)
	s.cmd.Env = append(s.cmd.Env, env...)
	for _, kv := range env {
		switch k, v, _ := strings.Cut(kv, "="); k {
		case "FLEET_DATA_DIR":
			s.DataDir = v
		case "FLEET_OPERATOR_TOKEN":
			s.Token = v
		}
	}
	stdout, err := s.cmd.StdoutPipe()
	require.NoError(t, err)
	s.cmd.Stderr = s.out
	require.NoError(t, s.cmd.Start())
	ready := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			_, _ = s.out.Write([]byte(line + "\n"))
			if m := listeningLine.FindStringSubmatch(line); m != nil && s.URL == "" {
				s.URL = "http://" + m[1]
			}
			if m := natsLine.FindStringSubmatch(line); m != nil && s.NATS == "" {
				s.NATS = m[1]
			}
			if strings.Contains(line, readyLine) {
				close(ready)
			}
		}
	}()
	t.Cleanup(s.stop)
	select {
	case <-ready:
		s.API = s.URL + "/api/fleet"
		if s.Token == "" {
			// The stack generated one and keeps it in the data dir.
			b, err := os.ReadFile(filepath.Join(s.DataDir, "operator-token"))
			require.NoError(t, err)
			s.Token = strings.TrimSpace(string(b))
		}
	case <-time.After(60 * time.Second):
		t.Fatalf("stack did not start within 60s; output:\n%s", s.out.String())
	}
	return s
}

// kill stops the stack as a crash would: SIGKILL, no shutdown.
func (s *Stack) kill() {
	s.t.Helper()
	require.NoError(s.t, s.cmd.Process.Signal(syscall.SIGKILL))
	_ = s.cmd.Wait()
}

func (s *Stack) stop() {
	if s.cmd.Process == nil || s.cmd.ProcessState != nil {
		return
	}
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan error, 1)
	go func() { done <- s.cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil && !s.t.Failed() {
			s.t.Errorf("stack exited with %v; output:\n%s", err, s.out.String())
		}
	case <-time.After(30 * time.Second):
		_ = s.cmd.Process.Kill()
		<-done
		s.t.Errorf("stack did not stop within 30s of SIGTERM; output:\n%s", s.out.String())
	}
	if s.t.Failed() {
		s.t.Logf("stack output:\n%s", s.out.String())
	}
}

// Response is an HTTP answer.
type Response struct {
	Status int
	Header http.Header
	Body   []byte
}

// JSON decodes the body.
func (r Response) JSON(t *testing.T, v any) {
	t.Helper()
	require.NoError(t, json.Unmarshal(r.Body, v), "body: %s", r.Body)
}

// Map decodes the body into a map.
func (r Response) Map(t *testing.T) map[string]any {
	t.Helper()
	var m map[string]any
	r.JSON(t, &m)
	return m
}

var client = &http.Client{Timeout: 30 * time.Second}

// Call sends a request. body may be nil, a string (sent as is) or a value
// (sent as JSON). headers are name, value pairs.
func Call(t *testing.T, method, url, token string, body any, headers ...string) Response {
	t.Helper()
	var rd io.Reader
	contentType := ""
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
		contentType = "text/markdown"
	case []byte:
		rd = bytes.NewReader(b)
		contentType = "application/json"
	default:
		data, err := json.Marshal(b)
		require.NoError(t, err)
		rd = bytes.NewReader(data)
		contentType = "application/json"
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, url, rd)
	require.NoError(t, err)
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := client.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return Response{Status: resp.StatusCode, Header: resp.Header, Body: data}
}

// Op calls the API as the operator in product.
func (s *Stack) Op(method, path, product string, body any) Response {
	s.t.Helper()
	var hs []string
	if product != "" {
		hs = []string{"x-product-id", product}
	}
	return Call(s.t, method, s.API+path, s.Token, body, hs...)
}

// As calls the API with token in product.
func (s *Stack) As(token, method, path, product string, body any) Response {
	s.t.Helper()
	var hs []string
	if product != "" {
		hs = []string{"x-product-id", product}
	}
	return Call(s.t, method, s.API+path, token, body, hs...)
}

// Product declares a product owning repos.
func (s *Stack) Product(id string, repos ...string) {
	s.t.Helper()
	r := s.Op(http.MethodPut, "/products/"+id, "", map[string]any{"repos": repos})
	require.Equal(s.t, http.StatusOK, r.Status, "put product: %s", r.Body)
}

// Factory enrolls a factory serving product, heartbeats caps and repos, and
// returns its token.
func (s *Stack) Factory(id, product string, seats int, caps, repos []string) string {
	s.t.Helper()
	r := s.Op(http.MethodPost, "/factories/enroll", "", map[string]any{
		"factoryId": id, "kind": "static", "products": []string{product}, "seatLimit": seats,
	})
	require.Equal(s.t, http.StatusCreated, r.Status, "enroll: %s", r.Body)
	var enrolled struct {
		Token string `json:"token"`
	}
	r.JSON(s.t, &enrolled)
	require.NotEmpty(s.t, enrolled.Token)
	hb := s.As(enrolled.Token, http.MethodPost, "/factories/heartbeat", "", map[string]any{
		"capabilities": caps, "repos": repos, "load": 0, "health": "ok",
	})
	require.Equal(s.t, http.StatusOK, hb.Status, "heartbeat: %s", hb.Body)
	return enrolled.Token
}

// Manifest builds a job manifest.
func Manifest(title, repo string, caps ...string) string {
	return fmt.Sprintf("---\ntitle: %s\nrepo: %s\ncapabilities: [%s]\n---\nDo %s.\n", title, repo, strings.Join(caps, ", "), title)
}

// Submit submits a manifest and returns the job id.
func (s *Stack) Submit(product, manifest string) string {
	s.t.Helper()
	r := s.Op(http.MethodPost, "/jobs", product, manifest)
	require.Equal(s.t, http.StatusCreated, r.Status, "submit: %s", r.Body)
	return r.Map(s.t)["id"].(string)
}

// Claim claims as factory token, which must get a job, and returns the
// job's id and its lease epoch.
func (s *Stack) Claim(token string) (jobID string, leaseEpoch int64) {
	s.t.Helper()
	r := s.As(token, http.MethodPost, "/claim", "", nil)
	require.Equal(s.t, http.StatusOK, r.Status, "claim: %s", r.Body)
	var cl struct {
		Job        struct{ ID string } `json:"job"`
		LeaseEpoch int64               `json:"leaseEpoch"`
	}
	r.JSON(s.t, &cl)
	return cl.Job.ID, cl.LeaseEpoch
}

// Job reads a job.
func (s *Stack) Job(product, id string) map[string]any {
	s.t.Helper()
	r := s.Op(http.MethodGet, "/jobs/"+id, product, nil)
	require.Equal(s.t, http.StatusOK, r.Status, "get job: %s", r.Body)
	return r.Map(s.t)
}

// Eventually polls cond until it holds or the deadline passes.
func Eventually(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s", what, within)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// freePort returns a TCP port free on loopback right now.
func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// portOf returns the port of a URL such as nats://127.0.0.1:4222.
func portOf(t *testing.T, url string) int {
	t.Helper()
	u, err := neturl.Parse(url)
	require.NoError(t, err)
	p, err := strconv.Atoi(u.Port())
	require.NoError(t, err)
	return p
}
