//go:build unix

package engine

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Spec is one engine run.
type Spec struct {
	Argv []string
	Dir  string
	Env  []string
	// Stdin is fed to the engine; nil means /dev/null.
	Stdin io.Reader
	// LogPath receives stdout and stderr, appended, except a stream that
	// Stdout or Stderr takes.
	LogPath string
	// Stdout and Stderr, when set, receive the engine's stdout or stderr
	// through a pipe, as it arrives (a structured engine's events are
	// parsed while it runs). They see everything the run wrote by the
	// time Run returns.
	Stdout, Stderr io.Writer
	// Grace is how long the engine gets between SIGTERM and SIGKILL when
	// it is stopped.
	Grace time.Duration
	// User, if set, is the account the engine runs as (the factory must
	// be root). Env should then come from User.Env.
	User *User
	// Started, if set, is called with the process group id once the engine
	// runs.
	Started func(pgid int)
	// Contain, if set, holds everything the engine starts, and ends it all
	// when the engine ends: a cgroup named Run, else a kill of what
	// carries the run's mark. Run must then name the run (unique among the
	// factory's runs in flight).
	Contain *Containment
	Run     string
}

// Result is how a run ended.
type Result struct {
	// ExitCode is the engine's exit status; -1 when a signal ended it.
	ExitCode int
	// Signal names the signal that ended it, if one did.
	Signal string
	// Stopped says the run was stopped because ctx ended; context.Cause(ctx)
	// says why (budget, fence, shutdown).
	Stopped  bool
	Duration time.Duration
	// Leftover, with Spec.Contain, says that processes of the run could
	// not all be ended.
	Leftover error
}

// Success reports a clean exit that nobody stopped.
func (r Result) Success() bool { return !r.Stopped && r.ExitCode == 0 }

func (r Result) String() string {
	switch {
	case r.Stopped:
		return fmt.Sprintf("stopped after %s", r.Duration.Round(time.Millisecond))
	case r.Signal != "":
		return fmt.Sprintf("killed by %s after %s", r.Signal, r.Duration.Round(time.Millisecond))
	}
	return fmt.Sprintf("exited %d after %s", r.ExitCode, r.Duration.Round(time.Millisecond))
}

// Run starts the engine and waits for it. When ctx ends first the engine's
// whole process group gets SIGTERM, then SIGKILL after Grace. Whatever the
// ending, the group is killed once the engine itself has exited, and with
// Contain so is every process the engine started, whether or not it left
// the group, so nothing outlives the run or keeps writing to the worktree.
// An error means the engine could not be started at all; Result.Leftover
// says whether something of the run could not be ended.
func Run(ctx context.Context, s Spec) (res Result, err error) {
	if len(s.Argv) == 0 {
		return Result{}, errors.New("engine: empty command")
	}
	jail, err := s.Contain.jail(s.Run)
	if err != nil {
		return Result{}, fmt.Errorf("engine: contain the run: %w", err)
	}
	defer func() {
		if jerr := jail.end(); jerr != nil {
			res.Leftover = fmt.Errorf("engine: end the run's processes: %w", jerr)
		}
	}()
	logf, err := os.OpenFile(s.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return Result{}, fmt.Errorf("engine: open log: %w", err)
	}
	defer logf.Close()

	// Without a cgroup the run's reaper (a subreaper) starts the engine and
	// ends everything below it; it runs as the factory and gives the engine
	// the run's credentials, so the engine cannot kill it.
	useReaper := jail != nil && jail.cg == nil && jail.reaper != ""
	argv := s.Argv
	if useReaper {
		prog, err := findProgram(s)
		if err != nil {
			return Result{}, fmt.Errorf("engine: start %s: %w", s.Argv[0], err)
		}
		var cred *syscall.Credential
		if s.User != nil {
			cred = s.User.credential()
		}
		argv = append([]string{jail.reaper}, reaperArgs(cred, append([]string{prog}, s.Argv[1:]...))...)
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir, cmd.Env = s.Dir, s.Env
	if jail != nil {
		cmd.Env = append(slices.Clone(s.Env), MarkEnv+"="+jail.mark)
	}
	// An *os.File, not a pipe: Wait then returns when the engine exits,
	// not when the last grandchild holding the pipe does.
	cmd.Stdout, cmd.Stderr = logf, logf
	var pipes outPipes
	defer pipes.close()
	if s.Stdout != nil {
		if cmd.Stdout, err = pipes.add(s.Stdout); err != nil {
			return Result{}, fmt.Errorf("engine: stdout pipe: %w", err)
		}
	}
	if s.Stderr != nil {
		if cmd.Stderr, err = pipes.add(s.Stderr); err != nil {
			return Result{}, fmt.Errorf("engine: stderr pipe: %w", err)
		}
	}
	cmd.Stdin = s.Stdin
	cmd.SysProcAttr = sysProcAttr()
	if s.User != nil && !useReaper {
		cmd.SysProcAttr.Credential = s.User.credential()
	}
	if useReaper {
		// A factory that dies has its reaper end the run.
		setDeathSignal(cmd.SysProcAttr, reaperKillSignal)
	}
	if jail != nil && jail.cg != nil {
		// Cloned into its cgroup: no fork of the engine is ever outside.
		jail.cg.apply(cmd.SysProcAttr)
	}
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return Result{}, fmt.Errorf("engine: start %s: %w", s.Argv[0], err)
	}
	pipes.started()
	pgid := cmd.Process.Pid
	if s.Started != nil {
		s.Started(pgid)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()

	var waitErr error
	stopped := false
	select {
	case waitErr = <-done:
	case <-ctx.Done():
		stopped = true
		_ = syscall.Kill(-pgid, syscall.SIGTERM)
		grace := time.NewTimer(s.Grace)
		select {
		case waitErr = <-done:
			grace.Stop()
		case <-grace.C:
			if useReaper {
				// Not SIGKILL: the reaper must live to end the run.
				_ = cmd.Process.Signal(reaperKillSignal)
				select {
				case waitErr = <-done:
				case <-time.After(reaperWait):
					_ = syscall.Kill(-pgid, syscall.SIGKILL)
					waitErr = <-done
				}
			} else {
				_ = syscall.Kill(-pgid, syscall.SIGKILL)
				waitErr = <-done
			}
		}
	}
	// Stragglers: children that outlived the engine, or ignored SIGTERM;
	// the rest of the run (outside the group) ends with the jail, before
	// Run returns.
	KillGroup(pgid)
	pipes.drain()

	res = Result{Stopped: stopped, Duration: time.Since(start), ExitCode: cmd.ProcessState.ExitCode()}
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		res.Signal = ws.Signal().String()
	}
	var exitErr *exec.ExitError
	if waitErr != nil && !errors.As(waitErr, &exitErr) {
		return res, fmt.Errorf("engine: wait: %w", waitErr)
	}
	return res, nil
}

// outPipes are the pipes of a run's streams that go to writers.
type outPipes struct {
	r, w   []*os.File
	copies sync.WaitGroup
}

// add makes a pipe whose read end is copied to dst, and returns its write
// end for the engine.
func (p *outPipes) add(dst io.Writer) (*os.File, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	p.r, p.w = append(p.r, r), append(p.w, w)
	p.copies.Go(func() { drain(dst, r) })
	return w, nil
}

// drain copies r to dst until r ends, whatever dst answers: a writer that
// fails (the factory's disk is full) must not stop the pipe being read, or
// the engine blocks on its next write once the pipe is full and is taken
// for a hung one; dst is still offered every byte (the watchdog and a
// preset's parser read them on their way to the file).
func drain(dst io.Writer, r io.Reader) {
	buf := make([]byte, 32<<10)
	for {
		n, err := r.Read(buf)
		if n > 0 {
			_, _ = dst.Write(buf[:n])
		}
		if err != nil {
			return
		}
	}
}

// started closes the factory's copies of the write ends: the pipes end
// when the engine and whatever inherited them are gone.
func (p *outPipes) started() {
	for _, w := range p.w {
		_ = w.Close()
	}
	p.w = nil
}

// pipeDrain bounds the wait for the last output once the engine's group
// is killed: a process of the run outside the group may still hold a
// pipe; it is ended with the run, and its output after this is lost.
const pipeDrain = 2 * time.Second

// drain waits for the copies to reach the end of the pipes, at most
// pipeDrain, then closes the read ends.
func (p *outPipes) drain() {
	done := make(chan struct{})
	go func() { p.copies.Wait(); close(done) }()
	t := time.NewTimer(pipeDrain)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
	}
	p.close()
	<-done
}

func (p *outPipes) close() {
	for _, f := range append(p.r, p.w...) {
		_ = f.Close()
	}
	p.r, p.w = nil, nil
}

// reaperWait bounds how long a reaper told to end the run gets to do it.
const reaperWait = 10 * time.Second

// findProgram is the engine's program as exec.Command finds it without
// a reaper (exec.LookPath, on the factory's PATH), and checks that it
// exists, so a missing one is a start error with a reaper too, not the
// reaper's exit status.
func findProgram(s Spec) (string, error) {
	prog := s.Argv[0]
	if !strings.Contains(prog, "/") {
		return exec.LookPath(prog)
	}
	p := prog
	if !filepath.IsAbs(p) {
		p = filepath.Join(s.Dir, p)
	}
	_, err := os.Stat(p)
	return prog, err
}

// KillGroup sends SIGKILL to process group pgid; a group that no longer
// exists is fine.
func KillGroup(pgid int) {
	if pgid > 1 {
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
	}
}

// Tail returns at most n bytes from the end of the file at path, for
// failure reports.
func Tail(path string, n int64) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return ""
	}
	off := max(fi.Size()-n, 0)
	b := make([]byte, fi.Size()-off)
	if _, err := f.ReadAt(b, off); err != nil && !errors.Is(err, io.EOF) {
		return ""
	}
	return string(b)
}
