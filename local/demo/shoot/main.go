// Command shoot is `make screenshots`: it runs `make demo`'s fleet
// (bin/fleet-demo on a free port, in a directory of its own), waits until
// its jobs have settled, and saves a picture of each main page of the
// console, signed in as an operator would, to docs/: the page of the job
// that went through a pull request (docs/console.png, the README's
// picture: its review, diff, live output, feedback, runs and timeline),
// the fleet map, the jobs list, the alerts and the budgets. Then it stops the demo (Ctrl-C, as a person would).
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/chromedp/chromedp"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "shoot:", err)
		os.Exit(1)
	}
}

var (
	consoleRE = regexp.MustCompile(`console\s+(http://\S+)/api/console/`)
	tokenRE   = regexp.MustCompile(`sign in with the operator token: (\S+)`)
)

func run() error {
	bin := flag.String("bin", "bin", "directory of the built binaries (make build)")
	out := flag.String("out", "docs", "directory the pictures are written to")
	flag.Parse()
	dir, err := os.MkdirTemp("", "fleet-shoot-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	demo := exec.Command(filepath.Join(*bin, "fleet-demo"), "-bin", *bin, "-listen", "127.0.0.1:0", "-dir", filepath.Join(dir, "demo"))
	demo.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	stdout, err := demo.StdoutPipe()
	if err != nil {
		return err
	}
	demo.Stderr = os.Stderr
	if err := demo.Start(); err != nil {
		return err
	}
	defer func() {
		_ = syscall.Kill(-demo.Process.Pid, syscall.SIGINT)
		_ = demo.Wait()
	}()
	var url, token string
	settled := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			line := sc.Text()
			fmt.Println(line)
			if m := consoleRE.FindStringSubmatch(line); m != nil {
				url = m[1]
			}
			if m := tokenRE.FindStringSubmatch(line); m != nil {
				token = m[1]
			}
			if strings.Contains(line, "reached a terminal stage") {
				close(settled)
			}
		}
	}()
	select {
	case <-settled:
	case <-ctx.Done():
		return errors.New("the demo's jobs did not settle within 5 minutes")
	}
	prJob, err := jobByTitle(ctx, url, token, "Add a --version flag")
	if err != nil {
		return err
	}

	browser, closeBrowser, err := startBrowser(ctx, dir)
	if err != nil {
		return err
	}
	defer closeBrowser()
	shots := []struct {
		file, route, ready string
	}{
		{"console.png", "#/job/" + prJob, `document.querySelector('#pull-request') !== null && document.querySelectorAll('#feedback li').length > 0`},
		{"console-fleet.png", "#/fleet", `[...document.querySelectorAll('main tbody tr')].length >= 2`},
		{"console-jobs.png", "#/jobs", `document.querySelectorAll('main tbody tr').length >= 5`},
		{"console-alerts.png", "#/alerts", `document.querySelector('main h2') !== null`},
		{"console-budgets.png", "#/budgets", `document.querySelector('main h2') !== null`},
	}
	if err := chromedp.Do(browser,
		chromedp.Navigate(url+"/api/console/"),
		chromedp.WaitVisible(chromedp.CSS("#token")),
		chromedp.SendKeys(chromedp.CSS("#token"), token),
		chromedp.SendKeys(chromedp.CSS("#signin-product"), "demo"),
		chromedp.Click(chromedp.CSS(`form button[type=submit]`)),
		chromedp.WaitVisible(chromedp.CSS("#nav")),
	); err != nil {
		return fmt.Errorf("sign in: %w", err)
	}
	for _, s := range shots {
		if err := chromedp.Do(browser, chromedp.Navigate(url+"/api/console/"+s.route)); err != nil {
			return fmt.Errorf("%s: %w", s.route, err)
		}
		if err := waitFor(browser, s.ready); err != nil {
			return fmt.Errorf("%s: %w", s.route, err)
		}
		// The page's own refresh settles (charts, the live log).
		time.Sleep(time.Second)
		png, err := chromedp.Run(browser, chromedp.FullScreenshot(100)) // 100: PNG
		if err != nil {
			return err
		}
		path := filepath.Join(*out, s.file)
		if err := os.WriteFile(path, png, 0o644); err != nil {
			return err
		}
		fmt.Println("shoot: wrote", path)
	}
	return nil
}

// waitFor polls expr in the page until it is true, for at most 20 s.
func waitFor(ctx context.Context, expr string) error {
	deadline := time.Now().Add(20 * time.Second)
	for {
		// A predicate that throws (an element not drawn yet) is false.
		if ok, err := chromedp.Run(ctx, chromedp.Evaluate[bool]("(() => { try { return !!("+expr+") } catch (e) { return false } })()")); err == nil && ok {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the page did not show %s", expr)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// startBrowser starts Debian's headless Chromium (make chromium).
func startBrowser(ctx context.Context, dir string) (context.Context, func(), error) {
	var path string
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			path = p
			break
		}
	}
	if path == "" {
		return nil, nil, errors.New("chromium is not on PATH (make chromium)")
	}
	opts := append(slices.Clone(chromedp.DefaultExecAllocatorOptions[:]), chromedp.ExecPath(path), chromedp.NoSandbox,
		chromedp.WindowSize(1366, 900), chromedp.UserDataDir(filepath.Join(dir, "chromium")))
	alloc, cancelAlloc := chromedp.NewExecAllocator(ctx, opts...)
	bctx, cancel := chromedp.NewContext(alloc)
	if err := chromedp.Do(bctx, chromedp.Navigate("about:blank")); err != nil {
		cancel()
		cancelAlloc()
		return nil, nil, fmt.Errorf("start chromium: %w", err)
	}
	return bctx, func() { cancel(); cancelAlloc() }, nil
}

// jobByTitle finds the demo product's job titled title.
func jobByTitle(ctx context.Context, url, token, title string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url+"/api/fleet/jobs?limit=100", nil)
	if err != nil {
		return "", err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("X-Product-Id", "demo")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	var page struct {
		Items []struct{ ID, Title string } `json:"items"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&page); err != nil {
		return "", err
	}
	for _, j := range page.Items {
		if j.Title == title {
			return j.ID, nil
		}
	}
	return "", fmt.Errorf("no job %q in the demo", title)
}
