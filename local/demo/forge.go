package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/gigafactory/fleet/shared/forge/github/githubtest"
)

// The demo's forge: GitHub's side of the demo fleet, with no network. The
// GitHub double (shared/forge/github/githubtest) serves on loopback with
// the demo origin as its repository demo/demo, the stack is pointed at it
// (FLEET_GITHUB_API_URL, a token and a webhook secret in files), and the
// demo's driver plays the reviewer octocat: on the pull request of the
// "pull request" job it asks for changes once, then approves the next
// iteration, as signed webhook deliveries to the stack.

// forgeOwner and forgeReviewer are the demo repository's owner on the
// double and the login that reviews there.
const forgeOwner, forgeReviewer = "demo", "octocat"

type forgeDouble struct {
	gh     *githubtest.Server
	srv    *http.Server
	url    string
	secret []byte
	dir    string
}

// startForge serves the double; origin is the demo origin's path (it may
// not exist yet: heads are read from it when pull requests are).
func startForge(dir, origin string) (*forgeDouble, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	f := &forgeDouble{gh: githubtest.New(nil, githubtest.Repo{Owner: forgeOwner, Name: demoRepo, GitDir: origin}),
		url: "http://" + ln.Addr().String(), secret: []byte("demo-webhook-secret-" + fmt.Sprint(time.Now().UnixNano())), dir: dir}
	if err := os.WriteFile(filepath.Join(dir, "github-token"), []byte("ghp_demo\n"), 0o600); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, "github-webhook-secret"), f.secret, 0o600); err != nil {
		return nil, err
	}
	f.srv = &http.Server{Handler: f.gh.Handler(), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = f.srv.Serve(ln) }()
	return f, nil
}

// env points the stack at the double.
func (f *forgeDouble) env() []string {
	return []string{"FLEET_GITHUB_API_URL=" + f.url, "FLEET_GITHUB_TOKEN_FILE=" + filepath.Join(f.dir, "github-token"),
		"FLEET_GITHUB_WEBHOOK_SECRET_FILE=" + filepath.Join(f.dir, "github-webhook-secret")}
}

// forgeConfig is the demo product's forge: its repo on the double.
func forgeConfig() map[string]any {
	return map[string]any{"repos": map[string]string{demoRepo: forgeOwner + "/" + demoRepo}, "maxIterations": 3,
		"mergeMethod": "squash", "reviewers": map[string]string{forgeReviewer: forgeReviewer}}
}

// review sends the reviewer's review of pull request number to the stack.
func (f *forgeDouble) review(ctx context.Context, stackURL string, number int, state, body string) error {
	status, err := githubtest.Send(ctx, stackURL+"/api/fleet/forge/github", f.secret, f.gh.Review(number, forgeReviewer, state, body))
	if err != nil {
		return err
	}
	if status != http.StatusOK {
		return fmt.Errorf("the stack answered the review webhook with %d", status)
	}
	return nil
}

func (f *forgeDouble) close() error {
	if f == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := f.srv.Shutdown(ctx); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
