package hostemu

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
	_ "time/tzdata" // the zones the schedule test names, on any machine

	"github.com/stretchr/testify/require"

	"github.com/gigafactory/fleet/shared/config"
	"github.com/gigafactory/fleet/shared/store/sqlite"
)

// repoRoot holds the real host.json and functions/.
const repoRoot = "../.."

func TestLoadAppRepo(t *testing.T) {
	t.Parallel()
	a, err := LoadApp(repoRoot)
	require.NoError(t, err)
	require.Equal(t, "handler", a.Host.CustomHandler.Description.DefaultExecutablePath)
	require.True(t, a.Host.CustomHandler.EnableForwardingHTTPRequest)
	require.True(t, a.Host.CustomHandler.EnableProxyingHTTPRequest)
	require.Equal(t, ModeProxy, a.Host.HTTPMode())
	require.Equal(t, "api", a.Host.RoutePrefix())

	byName := map[string]*Function{}
	var names []string
	for _, f := range a.Functions {
		byName[f.Name] = f
		names = append(names, f.Name)
	}
	require.Equal(t, []string{"api", "dispatch", "echo", "echosweep", "forgesweep", "gcsweep", "prune", "reaper", "redispatch"}, names)

	tests := []struct {
		function string
		trigger  string
		binding  string
		httpOnly bool
	}{
		{function: "api", trigger: "httpTrigger", binding: "req", httpOnly: true},
		{function: "dispatch", trigger: "cosmosDBTrigger", binding: "documents"},
		{function: "echo", trigger: "cosmosDBTrigger", binding: "documents"},
		{function: "echosweep", trigger: "timerTrigger", binding: "timer"},
		{function: "gcsweep", trigger: "timerTrigger", binding: "timer"},
		{function: "prune", trigger: "timerTrigger", binding: "timer"},
		{function: "reaper", trigger: "timerTrigger", binding: "timer"},
		{function: "redispatch", trigger: "timerTrigger", binding: "timer"},
	}
	for _, tc := range tests {
		t.Run(tc.function, func(t *testing.T) {
			t.Parallel()
			f := byName[tc.function]
			require.NotNil(t, f)
			trig, ok := f.Trigger()
			require.True(t, ok)
			require.Equal(t, tc.trigger, trig.Type)
			require.Equal(t, tc.binding, trig.Name)
			require.Equal(t, "in", trig.Direction)
			require.Equal(t, tc.httpOnly, f.HTTPOnly())
		})
	}

	// The dispatch retry policy is what the feed trigger follows.
	policy, err := byName["dispatch"].Retry.Policy()
	require.NoError(t, err)
	require.Equal(t, []time.Duration{time.Second, 2 * time.Second, 4 * time.Second}, delays(policy, 10))
}

// writeApp lays out an app under a temp root: host.json and one
// functions/<name>/function.json per entry. A nil host means no host.json.
func writeApp(t *testing.T, host *string, functions map[string]string) string {
	t.Helper()
	root := t.TempDir()
	if host != nil {
		require.NoError(t, os.WriteFile(filepath.Join(root, "host.json"), []byte(*host), 0o600))
	}
	for name, body := range functions {
		dir := filepath.Join(root, "functions", name)
		require.NoError(t, os.MkdirAll(dir, 0o700))
		require.NoError(t, os.WriteFile(filepath.Join(dir, "function.json"), []byte(body), 0o600))
	}
	return root
}

func ptr(s string) *string { return &s }

func TestLoadAppErrors(t *testing.T) {
	t.Parallel()
	goodHost := `{"version":"2.0","customHandler":{"description":{"defaultExecutablePath":"handler"}}}`
	timer := `{"bindings":[{"type":"timerTrigger","direction":"in","name":"timer","schedule":"0 * * * * *"}]}`
	tests := []struct {
		name      string
		host      *string
		functions map[string]string
		wantFile  string // the error names this file (relative to the root)
		want      string
	}{
		{name: "no host.json", host: nil, functions: map[string]string{"reaper": timer}, want: "read host.json"},
		{name: "host.json not JSON", host: ptr(`{"version":`), functions: map[string]string{"reaper": timer}, want: "host.json"},
		{name: "no handler executable", host: ptr(`{"version":"2.0"}`), functions: map[string]string{"reaper": timer},
			want: "defaultExecutablePath is required"},
		{name: "bad JSON", host: &goodHost, functions: map[string]string{"reaper": timer, "broken": `{"bindings":[`},
			wantFile: "functions/broken/function.json", want: "unexpected end of JSON input"},
		{name: "missing trigger", host: &goodHost,
			functions: map[string]string{"reaper": timer, "lonely": `{"bindings":[{"type":"http","direction":"out","name":"res"}]}`},
			wantFile:  "functions/lonely/function.json", want: "no trigger binding"},
		{name: "no bindings at all", host: &goodHost, functions: map[string]string{"empty": `{}`},
			wantFile: "functions/empty/function.json", want: "no trigger binding"},
		{name: "binding without a name", host: &goodHost,
			functions: map[string]string{"anon": `{"bindings":[{"type":"timerTrigger","direction":"in","schedule":"0 * * * * *"}]}`},
			wantFile:  "functions/anon/function.json", want: "bindings[0] needs a type and a name"},
		{name: "binding type not a string", host: &goodHost,
			functions: map[string]string{"typed": `{"bindings":[{"type":7,"direction":"in","name":"timer"}]}`},
			wantFile:  "functions/typed/function.json", want: "bindings[0].type"},
		{name: "retry of the wrong shape", host: &goodHost,
			functions: map[string]string{"retry": `{"bindings":[{"type":"timerTrigger","name":"timer"}],"retry":{"maxRetryCount":"three"}}`},
			wantFile:  "functions/retry/function.json", want: "maxRetryCount"},
		{name: "no functions", host: &goodHost, functions: nil, want: "no functions/*/function.json"},
		{name: "functionTimeout not a TimeSpan", host: ptr(`{"version":"2.0","functionTimeout":"5m","customHandler":{"description":{"defaultExecutablePath":"handler"}}}`),
			functions: map[string]string{"reaper": timer}, want: `host.json: functionTimeout: interval "5m"`},
		{name: "functionTimeout zero", host: ptr(`{"version":"2.0","functionTimeout":"00:00:00","customHandler":{"description":{"defaultExecutablePath":"handler"}}}`),
			functions: map[string]string{"reaper": timer}, want: "want a positive TimeSpan, or -1 for none"},
		// The host converts function.json into the trigger's attribute by
		// property type and resolves %SETTING% only in strings: an integer or
		// boolean property given as a reference (or any string) fails indexing.
		{name: "integer property from an app setting", host: &goodHost,
			functions: map[string]string{"feed": feed(`"feedPollDelay":"%FLEET_FEED_POLL_DELAY_MS%"`)},
			wantFile:  "functions/feed/function.json",
			want:      `function feed, binding documents: feedPollDelay must be a JSON number, not "%FLEET_FEED_POLL_DELAY_MS%": the Functions host resolves %SETTING% only in string properties`},
		{name: "integer property as a quoted number", host: &goodHost,
			functions: map[string]string{"feed": feed(`"maxItemsPerInvocation":"100"`)},
			wantFile:  "functions/feed/function.json", want: `function feed, binding documents: maxItemsPerInvocation must be a JSON number, not "100"`},
		{name: "integer property not whole", host: &goodHost,
			functions: map[string]string{"feed": feed(`"maxItemsPerInvocation":1.5`)},
			wantFile:  "functions/feed/function.json", want: `function feed, binding documents: maxItemsPerInvocation must be a whole number, not 1.5`},
		{name: "boolean property from an app setting", host: &goodHost,
			functions: map[string]string{"feed": feed(`"startFromBeginning":"%FROM_START%"`)},
			wantFile:  "functions/feed/function.json", want: `function feed, binding documents: startFromBeginning must be true or false, not "%FROM_START%"`},
		{name: "timer boolean as a string", host: &goodHost,
			functions: map[string]string{"reaper": `{"bindings":[{"type":"timerTrigger","direction":"in","name":"timer","schedule":"0 * * * * *","useMonitor":"true"}]}`},
			wantFile:  "functions/reaper/function.json", want: `function reaper, binding timer: useMonitor must be true or false, not "true"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			root := writeApp(t, tc.host, tc.functions)
			_, err := LoadApp(root)
			require.Error(t, err)
			require.ErrorContains(t, err, tc.want)
			if tc.wantFile != "" {
				require.ErrorContains(t, err, filepath.Join(root, filepath.FromSlash(tc.wantFile)))
			}
		})
	}
}

// TestFunctionTimeout: host.json's functionTimeout bounds every
// invocation the emulator makes, whatever the trigger (the host's default
// when absent, none for -1).
func TestFunctionTimeout(t *testing.T) {
	t.Parallel()
	timer := `{"bindings":[{"type":"timerTrigger","direction":"in","name":"timer","schedule":"0 * * * * *"}]}`
	web := `{"bindings":[{"type":"httpTrigger","direction":"in","name":"req","route":"{*path}"},{"type":"http","direction":"out","name":"res"}]}`
	get := Settings(func(name string) string { return map[string]string{"DB": "fleet"}[name] })
	st, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "fleet.db"))
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close() })
	for _, tc := range []struct {
		setting string
		want    time.Duration
	}{
		{setting: `,"functionTimeout":"00:00:02"`, want: 2 * time.Second},
		{setting: `,"functionTimeout":"01:30:00"`, want: 90 * time.Minute},
		{setting: ``, want: DefaultFunctionTimeout},
		{setting: `,"functionTimeout":"-1"`, want: 0},
	} {
		host := `{"version":"2.0","customHandler":{"description":{"defaultExecutablePath":"handler"}}` + tc.setting + `}`
		root := writeApp(t, &host, map[string]string{"tick": timer, "feed": feed(`"leaseContainerName":"leases"`), "web": web})
		emu, err := New(Options{Root: root, Settings: get, Store: st})
		require.NoError(t, err, tc.setting)
		require.Len(t, emu.timers, 1)
		require.Len(t, emu.feeds, 1)
		require.Equal(t, tc.want, emu.timers[0].client.Timeout, "timer, %s", tc.setting)
		require.Equal(t, tc.want, emu.feeds[0].client.Timeout, "feed, %s", tc.setting)
		require.Equal(t, tc.want, emu.front.client.Timeout, "HTTP envelope, %s", tc.setting)
		require.Equal(t, tc.want, emu.front.timeout, "HTTP proxy and forward, %s", tc.setting)
	}
}

// feed is a cosmosDBTrigger function.json with extra properties.
func feed(extra string) string {
	return `{"bindings":[{"type":"cosmosDBTrigger","direction":"in","name":"documents","connection":"CosmosDB",` +
		`"databaseName":"%DB%","containerName":"fleet_jobs",` + extra + `}]}`
}

// TestShippedFunctionsLoadStrictly: every function.json this repository
// ships passes the typed-property rules, with numbers and booleans written
// as such (what the Functions host needs to index them).
func TestShippedFunctionsLoadStrictly(t *testing.T) {
	t.Parallel()
	paths, err := filepath.Glob(filepath.Join(repoRoot, "functions", "*", "function.json"))
	require.NoError(t, err)
	require.NotEmpty(t, paths)
	for _, p := range paths {
		_, err := loadFunction(p)
		require.NoError(t, err, "%s", p)
	}
	_, err = LoadApp(repoRoot)
	require.NoError(t, err)
}

func TestSettingsResolve(t *testing.T) {
	t.Parallel()
	get := Settings(func(name string) string {
		return map[string]string{"A": "alpha", "B": "42", "DB_NAME": "fleet", "Cosmos:db": "x"}[name]
	})
	tests := []struct {
		in      string
		want    string
		missing []string
	}{
		{in: "%A%", want: "alpha"},
		{in: "pre-%A%-%B%-post", want: "pre-alpha-42-post"},
		{in: "%DB_NAME%", want: "fleet"},
		{in: "%Cosmos:db%", want: "x"},
		{in: "no references", want: "no references"},
		{in: "", want: ""},
		{in: "100% sure", want: "100% sure"},
		{in: "%UNSET%", missing: []string{"UNSET"}},
		{in: "%A%/%UNSET%/%ALSO_UNSET%", missing: []string{"UNSET", "ALSO_UNSET"}},
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			t.Parallel()
			got, err := get.Resolve(tc.in)
			if tc.missing != nil {
				require.Error(t, err)
				require.ErrorContains(t, err, strings.Join(tc.missing, ", "))
				require.ErrorContains(t, err, "is not set")
				require.Empty(t, got)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
		})
	}
}

func TestSettingsTypedProperties(t *testing.T) {
	t.Parallel()
	get := Settings(func(name string) string {
		return map[string]string{"N": "12", "T": "true", "WORD": "many"}[name]
	})
	b := Binding{Name: "documents", Props: map[string]json.RawMessage{
		"number":    json.RawMessage(`7`),
		"ref":       json.RawMessage(`"%N%"`),
		"word":      json.RawMessage(`"%WORD%"`),
		"unset":     json.RawMessage(`"%NOPE%"`),
		"flag":      json.RawMessage(`false`),
		"flagRef":   json.RawMessage(`"%T%"`),
		"methods":   json.RawMessage(`["get","post"]`),
		"notAList":  json.RawMessage(`"get"`),
		"notString": json.RawMessage(`{}`),
	}}
	n, err := get.Int(b, "number", 0)
	require.NoError(t, err)
	require.Equal(t, 7, n)
	n, err = get.Int(b, "absent", 100)
	require.NoError(t, err)
	require.Equal(t, 100, n)
	// The host resolves no reference in an integer property, set or not.
	_, err = get.Int(b, "ref", 0)
	require.ErrorContains(t, err, `binding documents: ref must be a JSON number, not "%N%": the Functions host resolves %SETTING% only in string properties`)
	_, err = get.Int(b, "word", 0)
	require.ErrorContains(t, err, `word must be a JSON number, not "%WORD%"`)
	_, err = get.Int(b, "unset", 0)
	require.ErrorContains(t, err, `unset must be a JSON number, not "%NOPE%"`)

	v, err := get.Bool(b, "flag", true)
	require.NoError(t, err)
	require.False(t, v)
	_, err = get.Bool(b, "flagRef", false)
	require.ErrorContains(t, err, `flagRef must be true or false, not "%T%"`)

	s, err := get.String(b, "absent", "leases")
	require.NoError(t, err)
	require.Equal(t, "leases", s)
	_, err = get.String(b, "notString", "")
	require.ErrorContains(t, err, "notString must be a string")

	list, err := get.StringList(b, "methods")
	require.NoError(t, err)
	require.Equal(t, []string{"get", "post"}, list)
	_, err = get.StringList(b, "notAList")
	require.ErrorContains(t, err, "notAList must be a list of strings")
}

func TestRetryDelays(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		retry   *Retry
		want    []time.Duration
		wantErr string
	}{
		{name: "no policy", retry: nil, want: nil},
		{name: "no retries", retry: &Retry{Strategy: "fixedDelay", MaxRetryCount: 0, DelayInterval: "00:00:05"}, want: nil},
		{name: "fixed delay", retry: &Retry{Strategy: "fixedDelay", MaxRetryCount: 3, DelayInterval: "00:00:05"},
			want: []time.Duration{5 * time.Second, 5 * time.Second, 5 * time.Second}},
		{name: "fixed fractional delay", retry: &Retry{Strategy: "fixedDelay", MaxRetryCount: 2, DelayInterval: "00:00:00.25"},
			want: []time.Duration{250 * time.Millisecond, 250 * time.Millisecond}},
		{name: "exponential, capped", retry: &Retry{Strategy: "exponentialBackoff", MaxRetryCount: 6, MinimumInterval: "00:00:01", MaximumInterval: "00:00:15"},
			want: []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 15 * time.Second, 15 * time.Second}},
		{name: "exponential in hours and minutes", retry: &Retry{Strategy: "exponentialBackoff", MaxRetryCount: 2, MinimumInterval: "00:01:00", MaximumInterval: "01:00:00"},
			want: []time.Duration{time.Minute, 2 * time.Minute}},
		{name: "exponential, many retries, never past the maximum", retry: &Retry{Strategy: "exponentialBackoff", MaxRetryCount: 70, MinimumInterval: "00:00:01", MaximumInterval: "00:00:10"},
			want: append([]time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second}, slices.Repeat([]time.Duration{10 * time.Second}, 66)...)},
		{name: "without end (-1), as on the host", retry: &Retry{Strategy: "fixedDelay", MaxRetryCount: -1, DelayInterval: "00:00:01"},
			want: slices.Repeat([]time.Duration{time.Second}, 100)},
		{name: "below -1", retry: &Retry{Strategy: "fixedDelay", MaxRetryCount: -2, DelayInterval: "00:00:01"}, wantErr: "maxRetryCount -2"},
		{name: "minimum above maximum", retry: &Retry{Strategy: "exponentialBackoff", MaxRetryCount: 1, MinimumInterval: "00:00:10", MaximumInterval: "00:00:01"},
			wantErr: "want 0 <= minimumInterval <= maximumInterval"},
		{name: "unknown strategy", retry: &Retry{Strategy: "linear", MaxRetryCount: 1}, wantErr: `retry strategy "linear"`},
		{name: "Go duration is not a TimeSpan", retry: &Retry{Strategy: "fixedDelay", MaxRetryCount: 1, DelayInterval: "5s"}, wantErr: "want hh:mm:ss"},
		{name: "bad number", retry: &Retry{Strategy: "exponentialBackoff", MaxRetryCount: 1, MinimumInterval: "00:xx:01", MaximumInterval: "00:00:02"},
			wantErr: `interval "00:xx:01"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := tc.retry.Policy()
			if tc.wantErr != "" {
				require.ErrorContains(t, err, tc.wantErr)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, delays(got, 100))
		})
	}
}

func TestParseSchedule(t *testing.T) {
	t.Parallel()
	from := time.Date(2026, 11, 2, 10, 14, 50, 0, time.UTC)
	tests := []struct {
		expr    string
		next    time.Time
		wantErr string
	}{
		{expr: "*/15 * * * * *", next: time.Date(2026, 11, 2, 10, 15, 0, 0, time.UTC)},
		{expr: "0 0 * * * *", next: time.Date(2026, 11, 2, 11, 0, 0, 0, time.UTC)},
		{expr: "30 */5 9-17 * * 1-5", next: time.Date(2026, 11, 2, 10, 15, 30, 0, time.UTC)},
		{expr: "*/5 * * * *", wantErr: "six NCRONTAB fields"}, // five fields: classic cron, not NCRONTAB
		{expr: "", wantErr: "six NCRONTAB fields"},
		{expr: "0 0 25 * * *", wantErr: "six NCRONTAB fields"},
		{expr: "0 0 0 30 2 *", wantErr: "never fires"}, // 30 February
		// Both day fields restricted: NCrontab wants a day matching both
		// (the first Monday of the month, 7 December), not either (3
		// November, a Tuesday within 1-7, by Vixie cron's rule).
		{expr: "0 0 9 1-7 * 1", next: time.Date(2026, 12, 7, 9, 0, 0, 0, time.UTC)},
		{expr: "0 0 9 13 * 5", next: time.Date(2026, 11, 13, 9, 0, 0, 0, time.UTC)}, // Friday the 13th
		{expr: "0 0 0 31 2 1", wantErr: "never fires"},
		{expr: "@every 10s", wantErr: "six NCRONTAB fields"},
		{expr: "@hourly", wantErr: "six NCRONTAB fields"},
		{expr: "TZ=Europe/Paris 0 0 9 * * *", wantErr: "time zone prefix"},
		{expr: "CRON_TZ=UTC 0 0 9 * * *", wantErr: "time zone prefix"},
	}
	// A day whose last hour comes twice (Santiago falls back at midnight
	// into 5 April 2026): passing over 4 April (a Saturday, not the 1st to
	// 3rd) must not end the search there; the next is Saturday 2 May.
	santiago, err := time.LoadLocation("America/Santiago")
	require.NoError(t, err)
	s, err := ParseSchedule("0 30 23 1-3 * 6")
	require.NoError(t, err)
	require.Equal(t, time.Date(2026, 5, 2, 23, 30, 0, 0, santiago), s.Next(time.Date(2026, 4, 4, 12, 0, 0, 0, santiago)))
	for _, tc := range tests {
		t.Run(tc.expr, func(t *testing.T) {
			t.Parallel()
			s, err := ParseSchedule(tc.expr)
			if tc.wantErr != "" {
				require.ErrorContains(t, err, tc.wantErr)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.next, s.Next(from))
		})
	}
}

// TestFeedLeasePrefixes: functions following one container with one lease
// container must differ in leaseContainerPrefix (the host names leases by
// prefix and container, so they would split the feed); with distinct
// prefixes each keeps its own checkpoint, unless the emulator's names for
// the two meet. The shipped app passes.
func TestFeedLeasePrefixes(t *testing.T) {
	t.Parallel()
	host := `{"version":"2.0","customHandler":{"description":{"defaultExecutablePath":"handler"}}}`
	get := Settings(func(name string) string { return map[string]string{"DB": "fleet"}[name] })
	st, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "fleet.db"))
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close() })

	root := writeApp(t, &host, map[string]string{"a": feed(`"leaseContainerName":"leases"`), "b": feed(`"leaseContainerName":"leases"`)})
	_, err = New(Options{Root: root, Settings: get, Store: st})
	require.ErrorContains(t, err, "functions a and b both follow fleet_jobs with the leases of leases and the same leaseContainerPrefix")

	root = writeApp(t, &host, map[string]string{"a": feed(`"leaseContainerName":"leases"`), "b": feed(`"leaseContainerName":"leases","leaseContainerPrefix":"b-"`)})
	emu, err := New(Options{Root: root, Settings: get, Store: st})
	require.NoError(t, err)
	ids := []string{emu.feeds[0].leaseID, emu.feeds[1].leaseID}
	slices.Sort(ids)
	require.Equal(t, []string{"hostemu.a.fleet_jobs", "hostemu.b-fleet_jobs"}, ids)

	// A prefix that spells another function's name as the emulator names
	// its checkpoint ("a" without a prefix, "a." as b's) is refused: the
	// two would write one checkpoint.
	root = writeApp(t, &host, map[string]string{"a": feed(`"leaseContainerName":"leases"`), "b": feed(`"leaseContainerName":"leases","leaseContainerPrefix":"a."`)})
	_, err = New(Options{Root: root, Settings: get, Store: st})
	require.ErrorContains(t, err, "functions a and b would keep one checkpoint, hostemu.a.fleet_jobs in leases: give b a leaseContainerPrefix")

	_, err = New(Options{Root: repoRoot, Settings: config.Default, Store: st})
	require.NoError(t, err, "the shipped dispatch and echo functions keep their own leases")
}

// delays lists the waits p gives before its retries, at most n of them.
func delays(p RetryPolicy, n int) []time.Duration {
	var out []time.Duration
	for made := 0; made < n && p.Allows(made); made++ {
		out = append(out, p.Delay(made))
	}
	return out
}
