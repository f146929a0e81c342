package engine

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestSplit(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   string
		want []string
		err  string
	}{
		{in: "claude -p @prompt", want: []string{"claude", "-p", "@prompt"}},
		{in: "  codex   exec\t--full-auto  ", want: []string{"codex", "exec", "--full-auto"}},
		{in: `sh -c 'echo "$FLEET_JOB_ID" > out'`, want: []string{"sh", "-c", `echo "$FLEET_JOB_ID" > out`}},
		{in: `a "b c" d\ e "x\"y" 'it''s'`, want: []string{"a", "b c", "d e", `x"y`, "its"}},
		{in: `a "" ''`, want: []string{"a", "", ""}},
		{in: `a "\n\$"`, want: []string{"a", `\n$`}},
		{in: "a \\\nb", want: []string{"a", "b"}},
		{in: "", err: "empty"},
		{in: "   ", err: "empty"},
		{in: `a 'b`, err: "unterminated"},
		{in: `a "b`, err: "unterminated"},
		{in: `a \`, err: "backslash"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			t.Parallel()
			got, err := Split(tt.in)
			if tt.err != "" {
				require.ErrorContains(t, err, tt.err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.want, got)
		})
	}
}

func TestExpand(t *testing.T) {
	t.Parallel()
	v := Vars{Prompt: "Fix the bug.\nCarefully.", PromptFile: "/w/jobs/j1/prompt.md", PersonaFile: "/w/jobs/j1/persona.md", JobID: "j1", Repo: "app",
		Title: "Fix it", Branch: "aq/job/j1", Worktree: "/w/worktrees/app/j1"}
	tests := []struct {
		tmpl       string
		want       []string
		usesPrompt bool
	}{
		{tmpl: "claude -p @prompt", want: []string{"claude", "-p", v.Prompt}, usesPrompt: true},
		{tmpl: "agent --file=@prompt-file", want: []string{"agent", "--file=" + v.PromptFile}, usesPrompt: true},
		{tmpl: "codex exec", want: []string{"codex", "exec"}},
		{tmpl: "run @job-id @repo @branch @worktree '@title'", want: []string{"run", "j1", "app", "aq/job/j1", v.Worktree, "Fix it"}},
		{tmpl: "@worktree/run.sh", want: []string{v.Worktree + "/run.sh"}},
		{tmpl: "mail ops@example.com @@prompt @repository", want: []string{"mail", "ops@example.com", "@prompt", "@repository"}},
		{tmpl: "x @prompt-files", want: []string{"x", "@prompt-files"}},
		{tmpl: "claude --append-system-prompt-file @persona-file", want: []string{"claude", "--append-system-prompt-file", v.PersonaFile}},
		{tmpl: "x --persona=@persona-file @persona-files", want: []string{"x", "--persona=" + v.PersonaFile, "@persona-files"}},
	}
	for _, tt := range tests {
		t.Run(tt.tmpl, func(t *testing.T) {
			t.Parallel()
			got, err := Expand(tt.tmpl, v)
			require.NoError(t, err)
			require.Equal(t, tt.want, got.Argv)
			require.Equal(t, tt.usesPrompt, got.UsesPrompt)
		})
	}

	_, err := Expand("claude -p @prompt", Vars{Prompt: strings.Repeat("x", MaxPromptArg+1)})
	require.ErrorContains(t, err, "@prompt-file")
	// A body beginning with '-' where the engine reads options would be
	// one: refused, unless after "--" or inside another word.
	body := Vars{Prompt: "--dangerously-bypass-approvals-and-sandbox", Title: "-a title"}
	_, err = Expand("codex exec --full-auto @prompt", body)
	require.ErrorContains(t, err, "the job body begins with '-'")
	for tmpl, want := range map[string][]string{
		"engine -- @prompt":           {"engine", "--", body.Prompt},
		"engine --message=@prompt":    {"engine", "--message=" + body.Prompt},
		"gh pr create --title @title": {"gh", "pr", "create", "--title", "-a title"},
	} {
		got, err := Expand(tmpl, body)
		require.NoError(t, err, tmpl)
		require.Equal(t, want, got.Argv, tmpl)
	}
	_, err = Expand("claude 'x", v)
	require.Error(t, err)

	prog, err := Program("  'my engine' --flag")
	require.NoError(t, err)
	require.Equal(t, "my engine", prog)
}

func script(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "engine.sh")
	require.NoError(t, os.WriteFile(p, []byte("#!/bin/sh\n"+body+"\n"), 0o755))
	return p
}

func TestRunExitAndEnv(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	log := filepath.Join(t.TempDir(), "engine.log")
	eng := script(t, `pwd; echo "job=$JOB"; cat; echo oops >&2; exit 3`)
	res, err := Run(context.Background(), Spec{Argv: []string{eng}, Dir: dir, Env: []string{"JOB=j1", "PATH=" + os.Getenv("PATH")},
		Stdin: strings.NewReader("the prompt\n"), LogPath: log, Grace: time.Second})
	require.NoError(t, err)
	require.Equal(t, 3, res.ExitCode)
	require.False(t, res.Success())
	require.False(t, res.Stopped)
	out := Tail(log, 1000)
	require.Contains(t, out, dir)
	require.Contains(t, out, "job=j1")
	require.Contains(t, out, "the prompt")
	require.Contains(t, out, "oops")
	require.Equal(t, "ps\n", Tail(log, 3))

	res, err = Run(context.Background(), Spec{Argv: []string{script(t, "exit 0")}, LogPath: log, Grace: time.Second})
	require.NoError(t, err)
	require.True(t, res.Success())

	_, err = Run(context.Background(), Spec{Argv: []string{filepath.Join(dir, "missing")}, LogPath: log})
	require.Error(t, err)
}

// TestRunKillsProcessGroup: when the context ends, the engine and every
// process it started get SIGTERM, and SIGKILL once the grace is over.
func TestRunKillsProcessGroup(t *testing.T) {
	t.Parallel()
	pids := t.TempDir()
	// The child ignores SIGTERM, so only the SIGKILL after the grace ends it.
	eng := script(t, `sh -c 'trap "" TERM; echo $$ > `+pids+`/child; while :; do sleep 0.1; done' &
echo $$ > `+pids+`/engine
wait`)
	errBudget := errors.New("budget")
	ctx, cancel := context.WithTimeoutCause(context.Background(), 500*time.Millisecond, errBudget)
	defer cancel()
	var pgid int
	start := time.Now()
	res, err := Run(ctx, Spec{Argv: []string{eng}, LogPath: filepath.Join(pids, "log"), Grace: 300 * time.Millisecond,
		Started: func(p int) { pgid = p }})
	require.NoError(t, err)
	require.True(t, res.Stopped)
	require.False(t, res.Success())
	require.ErrorIs(t, context.Cause(ctx), errBudget)
	require.Less(t, time.Since(start), 10*time.Second)
	require.Positive(t, pgid)
	for _, name := range []string{"engine", "child"} {
		b, err := os.ReadFile(filepath.Join(pids, name))
		require.NoError(t, err)
		pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
		require.NoError(t, err)
		require.Eventually(t, func() bool { return gone(pid) }, 5*time.Second, 20*time.Millisecond, "%s survived", name)
	}
}

// TestRunKillsStragglers: children the engine leaves running when it
// exits on its own are killed too.
func TestRunKillsStragglers(t *testing.T) {
	t.Parallel()
	pids := t.TempDir()
	eng := script(t, `sleep 300 &
echo $! > `+pids+`/child
exit 0`)
	res, err := Run(context.Background(), Spec{Argv: []string{eng}, LogPath: filepath.Join(pids, "log"), Grace: time.Second})
	require.NoError(t, err)
	require.True(t, res.Success())
	b, err := os.ReadFile(filepath.Join(pids, "child"))
	require.NoError(t, err)
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	require.NoError(t, err)
	require.Eventually(t, func() bool { return gone(pid) }, 5*time.Second, 20*time.Millisecond)
}

// fullDisk refuses every write, as a file on a full disk does, and counts
// what it was offered.
type fullDisk struct{ offered atomic.Int64 }

func (w *fullDisk) Write(b []byte) (int, error) {
	w.offered.Add(int64(len(b)))
	return 0, syscall.ENOSPC
}

// TestRunOutputThatCannotBeStored: an output writer that fails (the
// factory's disk is full) does not stop the engine's pipe being read, so
// the engine never blocks writing its output (to be stopped later as an
// idle one), and the writer is still offered every byte (the watchdog
// times the engine's activity on it, a preset's parser reads it).
func TestRunOutputThatCannotBeStored(t *testing.T) {
	t.Parallel()
	// Far more than a pipe holds (64 KiB on Linux).
	eng := script(t, `head -c 1048576 /dev/zero`)
	w := &fullDisk{}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	res, err := Run(ctx, Spec{Argv: []string{eng}, Env: []string{"PATH=" + os.Getenv("PATH")}, LogPath: filepath.Join(t.TempDir(), "log"),
		Grace: time.Second, Stdout: w})
	require.NoError(t, err)
	require.False(t, res.Stopped, "the engine blocked on its output until it was stopped")
	require.True(t, res.Success(), res.String())
	require.EqualValues(t, 1<<20, w.offered.Load())
}

// gone reports whether pid no longer runs (an unreaped zombie is gone).
func gone(pid int) bool {
	if syscall.Kill(pid, 0) != nil {
		return true
	}
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return os.IsNotExist(err)
	}
	i := strings.LastIndexByte(string(stat), ')')
	return i >= 0 && i+2 < len(stat) && (stat[i+2] == 'Z' || stat[i+2] == 'X')
}

// TestExpandInShellScriptIsNotInjection: a placeholder inside the script
// of `sh -c '…'` stands for its value and never becomes code, whatever the
// value holds and wherever in the script's quoting it appears. The
// expanded command really runs, with the environment Expand asks for.
func TestExpandInShellScriptIsNotInjection(t *testing.T) {
	t.Parallel()
	hostile := "it's \"quoted\" $(touch PWNED1) `touch PWNED2`; touch PWNED3 \\ $HOME 'x'\"y\" * -n"
	v := Vars{Title: hostile, Prompt: "line one\n$(touch PWNED4)\n'; touch PWNED5; '", JobID: "j1", Repo: "app",
		Branch: "aq/job/j1", Worktree: "/w/wt", PromptFile: "/w/p.md"}
	tests := []struct {
		name, tmpl, want string
	}{
		{name: "unquoted in the script", tmpl: `sh -c 'printf %s @title > out'`, want: hostile},
		{name: "inside double quotes in the script", tmpl: `sh -c 'printf %s "title: @title." > out'`, want: "title: " + hostile + "."},
		{name: "inside single quotes in the script", tmpl: `sh -c "printf %s '[@title]' > out"`, want: "[" + hostile + "]"},
		{name: "ansi-c quotes in the script", tmpl: `bash -c "printf %s \$'<@title>' > out"`, want: "<" + hostile + ">"},
		{name: "options before -c", tmpl: `env X=1 bash -e -o pipefail -c 'printf %s @title > out'`, want: hostile},
		{name: "clustered -c", tmpl: `bash -ec 'printf %s @title > out'`, want: hostile},
		{name: "the prompt", tmpl: `sh -c 'printf %s @prompt > out'`, want: v.Prompt},
		{name: "several in one word", tmpl: `sh -c 'printf %s @repo/@job-id:@title > out'`, want: "app/j1:" + hostile},
		{name: "an argument after the script stays an argument", tmpl: `sh -c 'printf %s "$1" > out' sh @title`, want: hostile},
		{name: "a literal at", tmpl: `sh -c 'printf %s a@@b@title > out'`, want: "a@b" + hostile},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			exp, err := Expand(tt.tmpl, v)
			require.NoError(t, err)
			res, err := Run(context.Background(), Spec{Argv: exp.Argv, Dir: dir, Env: append(os.Environ(), exp.Env...),
				LogPath: filepath.Join(dir, "log"), Grace: time.Second})
			require.NoError(t, err)
			log, _ := os.ReadFile(filepath.Join(dir, "log"))
			require.True(t, res.Success(), "%s: %s", res, log)
			entries, err := os.ReadDir(dir)
			require.NoError(t, err)
			for _, e := range entries {
				require.False(t, strings.HasPrefix(e.Name(), "PWNED"), "the value ran as code: %s (argv %q)", e.Name(), exp.Argv)
			}
			out, err := os.ReadFile(filepath.Join(dir, "out"))
			require.NoError(t, err)
			require.Equal(t, tt.want, string(out))
		})
	}
}

func TestEngineUserEnvAndReach(t *testing.T) {
	t.Parallel()
	u := &User{Name: "eng", UID: 1234, GID: 1234, Home: "/home/eng"}
	env := u.Env([]string{"PATH=/bin", "HOME=/root", "USER=root", "GIT_CONFIG_COUNT=1", "GIT_CONFIG_KEY_0=a.b", "GIT_CONFIG_VALUE_0=c"})
	require.Equal(t, []string{"PATH=/bin", "GIT_CONFIG_KEY_0=a.b", "GIT_CONFIG_VALUE_0=c", "HOME=/home/eng", "USER=eng", "LOGNAME=eng",
		"GIT_CONFIG_KEY_1=safe.directory", "GIT_CONFIG_VALUE_1=*", "GIT_CONFIG_COUNT=2"}, env)

	root := t.TempDir()
	open := filepath.Join(root, "open", "worktrees")
	require.NoError(t, os.MkdirAll(open, 0o755))
	for p := open; p != filepath.Dir(p) && p != os.TempDir(); p = filepath.Dir(p) {
		require.NoError(t, os.Chmod(p, 0o755))
	}
	require.NoError(t, u.CheckReach(open))
	private := filepath.Join(root, "private")
	require.NoError(t, os.MkdirAll(filepath.Join(private, "worktrees"), 0o755))
	require.NoError(t, os.Chmod(private, 0o700))
	require.ErrorContains(t, u.CheckReach(filepath.Join(private, "worktrees")), private+" (mode -rwx------) is not searchable")

	_, err := LookupUser("root")
	require.ErrorContains(t, err, "is root")
	_, err = LookupUser("no-such-user-here")
	require.Error(t, err)
}
