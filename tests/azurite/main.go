// Command azurite runs a command with Azurite's blob service up beside it:
// `make test` runs the tests through it, so the blob store's conformance
// suite (and the stack's artifact tests) run against a real Azure Storage
// emulator.
//
//	go run ./tests/azurite [-dir DIR] [-version V] -- go test ./...
//
// It installs the npm package azurite@V into DIR once (npm is the only
// network access), starts its blob service on a free loopback port chosen
// by the kernel, passes the endpoint to the command in FLEET_TEST_AZURITE_BLOB,
// and stops Azurite when the command ends, exiting with the command's status.
//
// When Azurite cannot be installed or started, the command runs without it
// and the tests that need it skip with a one-line reason, except under
// CI=true, where that is a failure: CI must run them.
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"time"
)

// envAzurite is blobtest.EnvAzurite; a test of this package checks they agree.
const envAzurite = "FLEET_TEST_AZURITE_BLOB"

// account is Azurite's development account.
const account = "devstoreaccount1"

// startTimeout bounds Azurite's start-up.
const startTimeout = time.Minute

var listening = regexp.MustCompile(`successfully listens on (http://127\.0\.0\.1:[0-9]+)`)

func main() {
	code, err := run()
	if err != nil {
		fmt.Fprintln(os.Stderr, "azurite:", err)
	}
	os.Exit(code)
}

func run() (int, error) {
	home, _ := os.UserCacheDir()
	dir := flag.String("dir", filepath.Join(home, "fleet-azurite"), "where azurite is installed (npm --prefix)")
	version := flag.String("version", "3.35.0", "the azurite npm package version")
	flag.Parse()
	args := flag.Args()
	if len(args) == 0 {
		return 2, errors.New("usage: azurite [-dir DIR] [-version V] -- command [args...]")
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	env := os.Environ()
	az, err := start(ctx, *dir, *version)
	if err != nil {
		if os.Getenv("CI") == "true" {
			return 1, fmt.Errorf("%w (CI=true: the Azurite tests must run)", err)
		}
		fmt.Fprintf(os.Stderr, "azurite: not available, tests that need it will skip: %v\n", err)
	} else {
		defer az.stop()
		fmt.Fprintf(os.Stderr, "azurite: blob service at %s\n", az.url)
		env = append(env, envAzurite+"="+az.url)
	}

	cmd := exec.Command(args[0], args[1:]...)
	cmd.Env = env
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	if err := cmd.Start(); err != nil {
		return 1, err
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err = <-done:
	case <-ctx.Done():
		_ = cmd.Process.Signal(syscall.SIGTERM)
		err = <-done
	}
	var exit *exec.ExitError
	switch {
	case err == nil:
		return 0, nil
	case errors.As(err, &exit):
		return max(exit.ExitCode(), 1), nil
	}
	return 1, err
}

type azurite struct {
	cmd  *exec.Cmd
	url  string
	done chan struct{}
}

// start installs azurite if needed and starts its blob service.
func start(ctx context.Context, dir, version string) (*azurite, error) {
	bin := filepath.Join(dir, "node_modules", ".bin", "azurite-blob")
	if !installed(dir, version) {
		if _, err := exec.LookPath("npm"); err != nil {
			return nil, errors.New("npm is not on PATH (install Node.js to run the Azurite tests)")
		}
		fmt.Fprintf(os.Stderr, "azurite: installing azurite@%s into %s\n", version, dir)
		install := exec.CommandContext(ctx, "npm", "install", "--silent", "--no-audit", "--no-fund", "--prefix", dir, "azurite@"+version)
		if out, err := install.CombinedOutput(); err != nil {
			return nil, fmt.Errorf("npm install azurite@%s: %v: %s", version, err, strings.TrimSpace(string(out)))
		}
	}
	// Port 0: the kernel picks a free port and Azurite prints it, so two
	// runs at once never collide. In memory: nothing to clean up after.
	cmd := exec.Command(bin, "--blobHost", "127.0.0.1", "--blobPort", "0", "--skipApiVersionCheck",
		"--inMemoryPersistence", "--extentMemoryLimit", "2048", "--disableTelemetry")
	// Its own process group, so stopping it stops whatever node started.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	az := &azurite{cmd: cmd, done: make(chan struct{})}
	urls := make(chan string, 1)
	var tail strings.Builder
	go func() {
		defer close(az.done)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			line := sc.Text()
			if m := listening.FindStringSubmatch(line); m != nil {
				urls <- m[1]
				break
			}
			if tail.Len() < 4096 {
				tail.WriteString(line + "\n")
			}
		}
		// Keep draining, so Azurite never blocks on a full pipe.
		_, _ = io.Copy(io.Discard, out)
		_ = cmd.Wait()
	}()
	select {
	case u := <-urls:
		az.url = u + "/" + account
		return az, nil
	case <-az.done:
		return nil, fmt.Errorf("azurite exited during start-up: %s", strings.TrimSpace(tail.String()))
	case <-time.After(startTimeout):
		az.stop()
		return nil, fmt.Errorf("azurite did not start within %s", startTimeout)
	case <-ctx.Done():
		az.stop()
		return nil, ctx.Err()
	}
}

// installed reports whether dir holds azurite at version.
func installed(dir, version string) bool {
	b, err := os.ReadFile(filepath.Join(dir, "node_modules", "azurite", "package.json"))
	return err == nil && strings.Contains(string(b), `"version": "`+version+`"`)
}

// stop ends Azurite's process group: SIGTERM, then SIGKILL if it lingers.
func (a *azurite) stop() {
	pgid := a.cmd.Process.Pid
	_ = syscall.Kill(-pgid, syscall.SIGTERM)
	select {
	case <-a.done:
	case <-time.After(10 * time.Second):
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		<-a.done
	}
}
