package agent

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"time"

	"github.com/gigafactory/fleet/infra/factory/internal/engine"
	"github.com/gigafactory/fleet/infra/factory/internal/engine/stream"
	"github.com/gigafactory/fleet/shared/fleet"
)

// Why the watchdog stopped an engine.
var (
	errEngineIdle = errors.New("the engine wrote nothing for the idle timeout")
	errExitGrace  = errors.New("the engine gave its result and did not exit within the exit grace")
)

// artifactEvents is the raw event stream of a structured engine.
const artifactEvents = "engine-events.jsonl"

func (jb *job) eventsPath() string { return filepath.Join(jb.dir, artifactEvents) }

// stdinPath is the file a preset reads its prompt from.
func (jb *job) stdinPath() string { return filepath.Join(jb.dir, "stdin.md") }

// presetSpec is the command of a preset run, and the file its prompt is
// read from on stdin: prompt (the job's body, with the forge's feedback on
// an iteration), or on a retry that resumes the engine's session the
// feedback of the run before.
func (jb *job) presetSpec(name string, p engine.Preset, prompt, personaPath string, env []string) (engine.Spec, string, error) {
	run := engine.PresetRun{Worktree: jb.wt.Path}
	persona := ""
	if pr := jb.j.Profile; pr != nil && strings.TrimSpace(pr.Body) != "" {
		persona = pr.Body
		if !p.PersonaInPrompt() {
			run.PersonaFile = personaPath
		}
	}
	if session := jb.resumable(name, p, env); session != "" {
		run.Resume, jb.resumed = session, session
		prompt = jb.resumePrompt()
	}
	if persona != "" && p.PersonaInPrompt() && run.Resume == "" {
		prompt = persona + "\n\n---\n\n" + prompt
	}
	path := jb.stdinPath()
	if err := os.WriteFile(path, []byte(prompt), 0o600); err != nil {
		return engine.Spec{}, "", err
	}
	if jb.user != nil {
		if err := os.Chown(path, int(jb.user.UID), int(jb.user.GID)); err != nil {
			return engine.Spec{}, "", err
		}
	}
	return engine.Spec{Argv: p.Argv(run), Env: env}, path, nil
}

// resumePrompt is the new prompt of a resumed session: what sent the job
// back (the forge's feedback on this iteration, the reviewer's, else the
// last failure).
func (jb *job) resumePrompt() string {
	var why string
	switch {
	case len(forgeFeedback(jb.j)) > 0:
		why = "Your pull request came back with this feedback:\n\n" + strings.Join(forgeFeedback(jb.j), "\n\n")
	case jb.j.Review != nil && strings.TrimSpace(jb.j.Review.Feedback) != "":
		why = "A reviewer sent your work back with this feedback:\n\n" + jb.j.Review.Feedback
	case jb.j.LastFailure != nil:
		why = "Your previous run of this task failed: " + jb.j.LastFailure.Reason
	default:
		why = "Your previous run of this task was interrupted."
	}
	return why + "\n\nThe working tree holds your work as last checkpointed. Continue the task and finish it."
}

// forgeFeedback is the forge's feedback that asked for the job's current
// iteration, one text per entry.
func forgeFeedback(j *fleet.Job) []string {
	var out []string
	for _, f := range j.Feedback {
		if j.Iteration == 0 || f.Iteration != j.Iteration {
			continue
		}
		who := string(f.Source)
		switch {
		case f.Source == fleet.FeedbackCheck && f.Name != "":
			who = "check " + f.Name
		case f.Author != "":
			who += " by " + f.Author
		}
		out = append(out, who+":\n"+f.Body)
	}
	return out
}

// resumable is the engine session a retry of the job resumes here, "" to
// start afresh: the newest ended run that reported a session ran on this
// factory with the same engine, and (Claude, whose sessions are kept per
// working directory) the session's file could be moved to this run's
// worktree.
func (jb *job) resumable(name string, p engine.Preset, env []string) string {
	var last *fleet.Run
	for i := len(jb.j.Runs) - 1; i >= 0; i-- {
		if jb.j.Runs[i].Session != "" {
			last = &jb.j.Runs[i]
			break
		}
	}
	if jb.noResume || last == nil || last.FactoryID != jb.a.cfg.FactoryID || last.Engine != name {
		return ""
	}
	if p != engine.PresetClaude {
		// Codex finds a thread by id whatever the directory, but only in
		// its own $CODEX_HOME, which a seat's home takes with it when its
		// run ends. One it cannot find ends the run at once (codex-cli
		// 0.171.0: "no rollout found for thread id", exit 1, nothing on
		// stdout), a crash that spends an attempt and, the thread still
		// being the newest session, comes back on every retry here; older
		// builds started a new thread instead, whose only prompt was the
		// resume prompt, not the task.
		// Its turn.completed will count the thread's earlier runs again:
		// what the rollout says they used is taken off (stream.Codex.Before).
		before, err := codexThreadUsage(codexHome(env), last.Session)
		if err != nil {
			jb.log.WarnContext(jb.ctx, "the engine session is not resumed; starting afresh", "session", last.Session, "err", err)
			return ""
		}
		jb.threadBefore = before
		return last.Session
	}
	from := jb.a.git.WorktreePath(jb.j.Repo, jb.j.ID, last.LeaseEpoch)
	if err := moveClaudeSession(claudeConfigDir(env), last.Session, from, jb.wt.Path, jb.user); err != nil {
		jb.log.WarnContext(jb.ctx, "the engine session is not resumed; starting afresh", "session", last.Session, "err", err)
		return ""
	}
	return last.Session
}

// claudeConfigDir is where Claude Code keeps its state for the engine's
// environment: $CLAUDE_CONFIG_DIR, else $HOME/.claude.
func claudeConfigDir(env []string) string {
	if dir := envValue(env, "CLAUDE_CONFIG_DIR"); dir != "" {
		return dir
	}
	return filepath.Join(envValue(env, "HOME"), ".claude")
}

// codexHome is where the Codex CLI keeps its state for the engine's
// environment: $CODEX_HOME, else $HOME/.codex.
func codexHome(env []string) string {
	if dir := envValue(env, "CODEX_HOME"); dir != "" {
		return dir
	}
	return filepath.Join(envValue(env, "HOME"), ".codex")
}

// envValue is key's value in env, the last entry winning as for the
// engine; "" when unset.
func envValue(env []string, key string) string {
	var v string
	for _, kv := range env {
		if val, ok := strings.CutPrefix(kv, key+"="); ok {
			v = val
		}
	}
	return v
}

// checkSessionName refuses a session id that is not a plain file name.
func checkSessionName(session string) error {
	if strings.ContainsAny(session, `/\`) || session == "" || strings.HasPrefix(session, ".") {
		return fmt.Errorf("session id %q is not a file name", session)
	}
	return nil
}

// errThreadFound ends the walk of findCodexThread.
var errThreadFound = errors.New("found")

// findCodexThread returns the path of thread's rollout under home:
// sessions/YYYY/MM/DD/rollout-<time>-<thread>.jsonl (or sessions/<thread>.jsonl),
// where codex exec resume looks for it.
func findCodexThread(home, thread string) (string, error) {
	if err := checkSessionName(thread); err != nil {
		return "", err
	}
	sessions := filepath.Join(home, "sessions")
	var found string
	err := filepath.WalkDir(sessions, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.Type().IsRegular() && (name == thread+".jsonl" || strings.HasPrefix(name, "rollout-") && strings.HasSuffix(name, "-"+thread+".jsonl")) {
			found = path
			return errThreadFound
		}
		return nil
	})
	switch {
	case errors.Is(err, errThreadFound):
		return found, nil
	case err != nil:
		return "", err
	}
	return "", fmt.Errorf("no rollout of thread %s under %s", thread, sessions)
}

// codexThreadUsage is the usage thread's rollout under home records so
// far; an error when codex has no rollout of it.
func codexThreadUsage(home, thread string) (stream.Usage, error) {
	path, err := findCodexThread(home, thread)
	if err != nil {
		return stream.Usage{}, err
	}
	f, err := os.Open(path)
	if err != nil {
		return stream.Usage{}, err
	}
	defer f.Close()
	return stream.CodexThreadUsage(f)
}

// projectNames are the ways Claude Code has named a working directory's
// session folder under projects/: every character but a letter or digit
// as '-' (the real CLI 2.1.197 turned /tmp/x/work.dir/app_x into
// -tmp-x-work-dir-app-x; shared/AGENTS.md says only '/', which the source
// contradicts), or only '/' in case an older CLI did. The one that names the
// session's folder is used for the new directory too.
var projectNames = []func(string) string{
	func(p string) string { return nonAlnum.ReplaceAllLiteralString(p, "-") },
	func(p string) string { return strings.ReplaceAll(p, "/", "-") },
}

var nonAlnum = regexp.MustCompile(`[^A-Za-z0-9]`)

// moveClaudeSession moves session's transcript (and its folder of side
// files, if any) from the project folder of directory from to that of
// directory to: Claude Code finds a session to resume only under the
// working directory it runs in (shared/AGENTS.md: --resume from another
// directory ends at once with error_during_execution).
//
// The config directory is the engine's (user's, when set): it may have
// planted links there for the factory to follow. A check by path before
// acting would race: with FLEET_ENGINE_USER nothing kills that user's
// processes when a run ends, and another seat's run may be live. So every
// step is taken in an os.Root at projects/, which resolves each name from
// a directory descriptor and refuses a link leading out of it, and that
// root must be the engine's own directory (a link in place of projects/
// or the config directory leads to someone else's). Within it the engine
// can reach nothing it does not already own.
func moveClaudeSession(configDir, session, from, to string, user *engine.User) error {
	if err := checkSessionName(session); err != nil {
		return err
	}
	uid, gid := os.Geteuid(), os.Getegid()
	if user != nil {
		uid, gid = int(user.UID), int(user.GID)
	}
	projects := filepath.Join(configDir, "projects")
	root, err := os.OpenRoot(projects)
	if err != nil {
		return err
	}
	defer root.Close()
	if fi, err := root.Stat("."); err != nil {
		return err
	} else if owner := fileUID(fi); owner != uid {
		return fmt.Errorf("%s belongs to uid %d, not the engine's %d", projects, owner, uid)
	}
	for _, name := range projectNames {
		src := name(from)
		if _, err := root.Stat(filepath.Join(src, session+".jsonl")); err != nil {
			continue
		}
		dst := name(to)
		if src == dst {
			return nil
		}
		if err := claudeProjectDir(root, dst, uid, gid); err != nil {
			return err
		}
		if err := root.Rename(filepath.Join(src, session+".jsonl"), filepath.Join(dst, session+".jsonl")); err != nil {
			return err
		}
		if err := root.Rename(filepath.Join(src, session), filepath.Join(dst, session)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
		return nil
	}
	return fmt.Errorf("no transcript of session %s for %s under %s", session, from, projects)
}

// claudeProjectDir makes sure dst in root is a directory of the engine's
// uid, giving it one the factory made: the chown is by descriptor, of the
// directory that was opened, never of what the name leads to by then.
func claudeProjectDir(root *os.Root, dst string, uid, gid int) error {
	if err := root.Mkdir(dst, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return err
	}
	d, err := root.Open(dst)
	if err != nil {
		return err
	}
	defer d.Close()
	fi, err := d.Stat()
	if err != nil {
		return err
	}
	switch owner := fileUID(fi); {
	case !fi.IsDir():
		return fmt.Errorf("%s is not a directory", dst)
	case owner == uid:
		return nil
	case owner != os.Geteuid():
		return fmt.Errorf("%s belongs to uid %d, not the engine's %d", dst, owner, uid)
	}
	return d.Chown(uid, gid)
}

// fileUID is the owner of fi's file, -1 when the system does not say.
func fileUID(fi fs.FileInfo) int {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return int(st.Uid)
	}
	return -1
}

// runOutput is where a run's output goes: the log, and for a structured
// engine its events file and parser; every byte counts as a sign of life.
type runOutput struct {
	activity   *stream.Activity
	reader     *stream.Reader
	transcript *stream.Transcript
	ended      bool
}

// watchOutput routes the engine's output through the run's watch: stdout
// and stderr through pipes into the log (and, for a preset, stdout into
// the events file and the parser too), timing its last output.
func (jb *job) watchOutput(spec *engine.Spec) (*runOutput, error) {
	a := jb.a
	o := &runOutput{activity: stream.NewActivity(a.clock)}
	jb.activity = o.activity
	// The log behind its cap; the activity sees every byte all the same.
	logf := io.Writer(jb.logw)
	stdout := logf
	if p, ok := a.cfg.Presets[jb.engine]; ok {
		if jb.eventsw == nil {
			// The run's, like the log: a second session (a resume that
			// failed) appends within the same cap.
			var err error
			if jb.eventsw, err = jb.openCapped(jb.eventsPath(), artifactEvents); err != nil {
				return nil, fmt.Errorf("open events file: %w", err)
			}
		}
		o.reader = stream.NewReader(p.Parser(a.cfg.Prices[jb.engine], jb.threadBefore), a.clock)
		jb.out = o.reader
		// The log (which the live output ships) is a transcript for
		// people; the raw events go to their own file, kept as an
		// artifact. The parser before the events file: a line in the file
		// is parsed.
		o.transcript = stream.NewTranscript(p.Transcript(), logf)
		stdout = io.MultiWriter(o.reader, jb.eventsw, o.transcript)
	}
	spec.Stdout, spec.Stderr = o.activity.Writer(stdout), o.activity.Writer(logf)
	return o, nil
}

// watchdog watches the run: the idle timeout for every engine, the exit
// grace for one whose final result can be read.
func (o *runOutput) watchdog(a *Agent) stream.Watchdog {
	w := stream.Watchdog{Clock: a.clock, Idle: a.cfg.EngineIdle, Activity: o.activity}
	if o.reader != nil {
		w.ExitGrace = a.cfg.EngineExitGrace
		w.ResultAt = func() time.Time { return o.reader.Facts().ResultAt }
	}
	return w
}

// end ends the parse once the engine's output has ended: the last line,
// when the engine did not end it with a newline, is parsed and rendered
// to the log. Only the first call acts.
func (o *runOutput) end() error {
	if o.reader == nil || o.ended {
		return nil
	}
	o.ended = true
	return errors.Join(o.reader.Close(), o.transcript.Close())
}

// Close ends the parse (the files are the run's).
func (o *runOutput) Close() error { return o.end() }

// runExit is how the engine's process ended, for the run's record.
func runExit(res engine.Result, cause error) *fleet.RunExit {
	x := &fleet.RunExit{Code: res.ExitCode, Signal: res.Signal, Reason: fleet.ExitExited}
	switch {
	case errors.Is(cause, errEngineIdle):
		x.Reason = fleet.ExitEngineIdle
	case errors.Is(cause, errExitGrace):
		x.Reason = fleet.ExitGrace
	case res.Stopped:
		x.Reason = fleet.ExitStopped
	case res.Signal != "":
		x.Reason = fleet.ExitSignal
	}
	if x.Code < -1 || x.Code > 255 {
		x.Code = -1
	}
	// A signal's name is a token on the wire ("segmentation fault").
	x.Signal = strings.ReplaceAll(x.Signal, " ", "_")
	if (fleet.EngineFacts{Exit: x}).Validate() != nil {
		x.Signal = ""
	}
	return x
}

// resumeFailed reports a resumed session that ended at once with an error
// and no turn: Claude Code does so when it cannot find the session.
func (jb *job) resumeFailed(res engine.Result) bool {
	if jb.resumed == "" || jb.out == nil || res.Stopped {
		return false
	}
	f := jb.out.Facts()
	return f.Outcome == stream.OutcomeError && f.Turns == 0 && !f.Limited()
}

// judge decides how the engine's run ended; failed says it failed, and
// the failure is reported. A structured engine is judged by its own final
// result (a Claude result with is_error true is a failure whatever its
// subtype); one ended after its result for not exiting is judged by that
// result alone. Any other engine by its exit status.
func (jb *job) judge(name string, res engine.Result, graced bool) (Outcome, bool) {
	ctx := jb.ctx
	crash := func() (Outcome, bool) {
		jb.checkpoint(ctx, "engine failed")
		msg := fmt.Sprintf("engine %s %s", name, res.String())
		if tail := strings.TrimSpace(engine.Tail(jb.logPath, outputTail)); tail != "" {
			msg += "; last output:\n" + tail
		}
		return jb.fail(fleet.FailCrash, msg, false), true
	}
	if jb.out == nil {
		if !res.Success() {
			return crash()
		}
		return 0, false
	}
	f := jb.out.Facts()
	switch {
	case f.Outcome == stream.OutcomeSuccess && (graced || res.Success()):
		jb.a.cool.succeeded(name)
		return 0, false
	case f.Limited():
		return jb.rateLimited(name, f), true
	case f.Outcome == stream.OutcomeError:
		jb.checkpoint(ctx, "engine error")
		detail := f.Detail
		if f.APIErrorStatus != 0 {
			detail = fmt.Sprintf("API status %d: %s", f.APIErrorStatus, detail)
		}
		// A server error (a 5xx, or a transport failure the engine could
		// not get past: stream.Facts.Transient) may pass; anything else
		// the engine said of its own work would only be said again.
		return jb.fail(fleet.FailEngineError, fmt.Sprintf("engine %s reported an error: %s", name, detail), f.APIErrorStatus >= 500 || f.Transient), true
	case !res.Success():
		return crash()
	}
	// Exited 0 without a final result: taken at its word.
	jb.log.WarnContext(ctx, "the engine exited 0 without a final result", "engine", name, "events", f.Events)
	return 0, false
}

// rateLimited ends a run the provider's rate limit stopped: the engine
// cools down here (until the reset the engine named, else a backoff), the
// failure carries the cooldown, so the requeued job is not sent straight
// back, and it is retryable and spends no attempt.
func (jb *job) rateLimited(name string, f stream.Facts) Outcome {
	a, ctx := jb.a, jb.ctx
	until := a.cool.limited(name, f.LimitResetsAt)
	jb.log.WarnContext(ctx, "the engine's provider is rate limiting this factory; cooling down", "engine", name, "until", until)
	jb.checkpoint(ctx, "rate limited")
	detail := f.Detail
	if detail == "" {
		detail = "rate limit"
	}
	return jb.fail(fleet.FailRateLimited, fmt.Sprintf("engine %s was refused by its provider's rate limit (this factory cools down for it until %s): %s",
		name, until.UTC().Format(time.RFC3339), detail), true)
}
