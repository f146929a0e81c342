package config

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gigafactory/fleet/infra/factory/internal/engine"
	"github.com/gigafactory/fleet/infra/factory/internal/engine/stream"
)

// base is the smallest valid environment.
func base(extra ...string) []string {
	return append([]string{
		"FLEET_URL=http://127.0.0.1:7071",
		"FLEET_FACTORY_ID=laptop-1",
		"FLEET_FACTORY_TOKEN=ft_secret",
		"FLEET_REPO_BASE=/srv/repos",
		"FLEET_WORK_DIR=/srv/factory",
		"FLEET_ENGINE_CLAUDE=claude -p @prompt",
	}, extra...)
}

func TestParseDefaults(t *testing.T) {
	t.Parallel()
	c, err := Parse(nil, base())
	require.NoError(t, err)
	require.Equal(t, "http://127.0.0.1:7071", c.URL)
	require.Equal(t, TransportPoll, c.Transport)
	require.Equal(t, 1, c.Seats)
	require.Equal(t, map[string]string{"claude": "claude -p @prompt"}, c.Engines)
	require.Equal(t, "claude", c.DefaultEngine)
	require.Equal(t, ShipShipped, c.ShipStage)
	require.Equal(t, DefaultHeartbeat, c.Heartbeat)
	require.LessOrEqual(t, c.Heartbeat, 30*time.Second, "well inside the 90 s stale threshold")
	require.Zero(t, c.Renew, "auto: a third of the lease")
	require.Equal(t, DefaultGCInterval, c.GCInterval, "poll has no GC requests: sweep on our own")
	require.True(t, c.HeartbeatEnabled)
	require.Equal(t, "laptop-1", c.Subscription)
	require.Equal(t, "fleet factory laptop-1", c.GitName)
	require.Equal(t, "info", c.LogLevel)
	require.False(t, c.NoRunCgroups, "a cgroup per run where the factory can")
	require.EqualValues(t, 32<<20, c.EngineLogMax)
	require.Equal(t, DefaultDefaultWall, c.DefaultWall)
	require.Equal(t, DefaultMaxWall, c.MaxWall)
	require.Equal(t, "[redacted]", c.Redacted().Token)
}

func TestParseTable(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		args  []string
		env   []string
		check func(t *testing.T, c Config)
		err   string
	}{
		{name: "flags win over env", args: []string{"--seats", "4", "--transport", "nats", "--nats-url", "nats://x:4222"},
			env: base("FLEET_SEATS=2", "FLEET_TRANSPORT=poll"),
			check: func(t *testing.T, c Config) {
				require.Equal(t, 4, c.Seats)
				require.Equal(t, TransportNATS, c.Transport)
				require.Equal(t, "nats://x:4222", c.NATSURL)
				require.Zero(t, c.GCInterval, "a bus carries GC requests: no sweep of our own by default")
			}},
		{name: "trailing slash trimmed", env: base("FLEET_URL=https://fleet.example.com/"),
			check: func(t *testing.T, c Config) { require.Equal(t, "https://fleet.example.com", c.URL) }},
		{name: "url with /api refused", env: base("FLEET_URL=http://x/api"), err: "without /api"},
		{name: "url not http", env: base("FLEET_URL=ftp://x"), err: "not an http(s) URL"},
		{name: "missing token", env: append(base(), "FLEET_FACTORY_TOKEN="), err: "or FLEET_FACTORY_TOKEN is required"},
		{name: "bad factory id", env: base("FLEET_FACTORY_ID=../x"), err: "--factory-id"},
		{name: "engines from env and flags, lower-cased", args: []string{"--engine", "codex=codex exec --full-auto @prompt"},
			env: base("FLEET_ENGINE_DEVIN=devin run"),
			check: func(t *testing.T, c Config) {
				require.Equal(t, map[string]string{"claude": "claude -p @prompt", "devin": "devin run", "codex": "codex exec --full-auto @prompt"}, c.Engines)
				require.Equal(t, "claude", c.DefaultEngine, "the first by name")
			}},
		{name: "engine user is a setting, not an engine", env: base("FLEET_ENGINE_USER=nobody"),
			check: func(t *testing.T, c Config) {
				require.Equal(t, "nobody", c.EngineUser)
				require.Equal(t, map[string]string{"claude": "claude -p @prompt"}, c.Engines)
			}},
		{name: "engine uids: a range, a setting and not an engine", env: base("FLEET_ENGINE_UIDS=20000-20031", "FLEET_SEATS=32"),
			check: func(t *testing.T, c Config) {
				require.Equal(t, UIDRange{First: 20000, Last: 20031}, c.EngineUIDs)
				require.Equal(t, 32, c.EngineUIDs.Size())
				require.Equal(t, map[string]string{"claude": "claude -p @prompt"}, c.Engines)
			}},
		{name: "engine uids: one uid for one seat", args: []string{"--engine-uids", "30000"}, env: base(),
			check: func(t *testing.T, c Config) { require.Equal(t, UIDRange{First: 30000, Last: 30000}, c.EngineUIDs) }},
		{name: "engine uids: fewer than the seats", env: base("FLEET_ENGINE_UIDS=20000-20002", "FLEET_SEATS=4"), err: "holds 3 uids, fewer than the 4 seats"},
		{name: "engine uids: root", env: base("FLEET_ENGINE_UIDS=0-31"), err: "--engine-uids (FLEET_ENGINE_UIDS): \"0-31\" includes uid 0"},
		{name: "engine uids: nobody", env: base("FLEET_ENGINE_UIDS=65530-65540"), err: "includes 65534 (nobody)"},
		{name: "engine uids: backwards", env: base("FLEET_ENGINE_UIDS=20031-20000"), err: "ends before it starts"},
		{name: "engine uids: not numbers", env: base("FLEET_ENGINE_UIDS=engine"), err: "is not a uid range such as 20000-20031"},
		{name: "engine uids: not -1", env: base("FLEET_ENGINE_UIDS=4294967290-4294967295"), err: "which is no uid"},
		{name: "engine uids and engine user exclude each other", env: base("FLEET_ENGINE_UIDS=20000-20031", "FLEET_ENGINE_USER=nobody"), err: "give one, not both"},
		{name: "engine log cap: a setting, not an engine", env: base("FLEET_ENGINE_LOG_MAX_BYTES=1048576"),
			check: func(t *testing.T, c Config) {
				require.EqualValues(t, 1<<20, c.EngineLogMax)
				require.Equal(t, map[string]string{"claude": "claude -p @prompt"}, c.Engines)
			}},
		{name: "engine log cap: the flag", args: []string{"--engine-log-max-bytes", "52428800"}, env: base("FLEET_ENGINE_LOG_MAX_BYTES=1048576"),
			check: func(t *testing.T, c Config) { require.EqualValues(t, 50<<20, c.EngineLogMax) }},
		{name: "engine log cap: not a number", env: base("FLEET_ENGINE_LOG_MAX_BYTES=32MiB"),
			err: `--engine-log-max-bytes (FLEET_ENGINE_LOG_MAX_BYTES): "32MiB" is not a number of bytes from 65536 to 52428800`},
		{name: "engine log cap: too small for a head and a tail", env: base("FLEET_ENGINE_LOG_MAX_BYTES=65535"), err: `"65535" is not a number of bytes from 65536`},
		{name: "engine log cap: more than an artifact may be", env: base("FLEET_ENGINE_LOG_MAX_BYTES=52428801"),
			err: "to 52428800 (the coordinator's default FLEET_ARTIFACT_MAX_BYTES: a larger engine.log would be refused as an artifact)"},
		{name: "engine log cap: zero", env: base("FLEET_ENGINE_LOG_MAX_BYTES=0"), err: "--engine-log-max-bytes"},
		{name: "run cgroups off", env: base("FLEET_RUN_CGROUPS=off"),
			check: func(t *testing.T, c Config) { require.True(t, c.NoRunCgroups) }},
		{name: "run cgroups bad", env: base("FLEET_RUN_CGROUPS=no"), err: "--run-cgroups (FLEET_RUN_CGROUPS): \"no\" is not auto or off"},
		{name: "default engine must exist", env: base("FLEET_DEFAULT_ENGINE=codex"), err: "not a configured engine"},
		{name: "empty engine template", env: base("FLEET_ENGINE_X= "), err: "template is empty"},
		{name: "bad engine name", env: base("FLEET_ENGINE_A:B=x"), err: "engine name"},
		{name: "no engine", env: []string{"FLEET_URL=http://x", "FLEET_FACTORY_ID=f", "FLEET_FACTORY_TOKEN=t", "FLEET_REPO_BASE=/r", "FLEET_WORK_DIR=/w"}, err: "no engine configured"},
		{name: "seats out of range", env: base("FLEET_SEATS=0"), err: "--seats"},
		{name: "heartbeat too slow for the stale threshold", env: base("FLEET_HEARTBEAT_INTERVAL=300s"), err: "too long"},
		{name: "bad duration", env: base("FLEET_CHECKPOINT_INTERVAL=often"), err: "--checkpoint-interval"},
		{name: "unknown transport", env: base("FLEET_TRANSPORT=carrier-pigeon"), err: "not poll, nats or servicebus"},
		{name: "nats needs a url", env: base("FLEET_TRANSPORT=nats"), err: "FLEET_NATS_URL"},
		{name: "servicebus as terraform sets it", env: base("FLEET_TRANSPORT=servicebus", "ServiceBus__fullyQualifiedNamespace=ns.servicebus.windows.net",
			"FLEET_SERVICEBUS_SUBSCRIPTION=pool-a", "AZURE_CLIENT_ID=cid"),
			check: func(t *testing.T, c Config) {
				require.Equal(t, "pool-a", c.Subscription)
				require.Equal(t, DefaultTopic, c.ServiceBusTopic)
				require.Equal(t, "cid", c.ServiceBusClientID)
				require.False(t, c.ServiceBusSessions)
			}},
		{name: "servicebus sessions", env: base("FLEET_TRANSPORT=servicebus", "ServiceBus__fullyQualifiedNamespace=ns", "FLEET_SERVICEBUS_SESSIONS=true"),
			check: func(t *testing.T, c Config) { require.True(t, c.ServiceBusSessions) }},
		{name: "servicebus sessions not a bool", env: base("FLEET_TRANSPORT=servicebus", "ServiceBus__fullyQualifiedNamespace=ns", "FLEET_SERVICEBUS_SESSIONS=maybe"),
			err: "not true or false"},
		{name: "once turns heartbeats off", args: []string{"--once"}, env: base(),
			check: func(t *testing.T, c Config) {
				require.True(t, c.Once)
				require.False(t, c.HeartbeatEnabled)
				require.Equal(t, DefaultOnceWait, c.OnceWait)
			}},
		{name: "once with heartbeats forced on", args: []string{"--once", "--heartbeat=true"}, env: base(),
			check: func(t *testing.T, c Config) { require.True(t, c.HeartbeatEnabled) }},
		{name: "ship stage testing", env: base("FLEET_SHIP_STAGE=testing"),
			check: func(t *testing.T, c Config) { require.Equal(t, ShipTesting, c.ShipStage) }},
		{name: "ship stage review refused", env: base("FLEET_SHIP_STAGE=review"), err: "not shipped or testing"},
		{name: "repo urls", args: []string{"--repo-url", "b=https://git/b.git"}, env: base("FLEET_REPO_URLS=a=https://git/a.git, c=/srv/c.git"),
			check: func(t *testing.T, c Config) {
				require.Equal(t, map[string]string{"a": "https://git/a.git", "b": "https://git/b.git", "c": "/srv/c.git"}, c.RepoURLs)
			}},
		{name: "bad repo url", env: base("FLEET_REPO_URLS=nourl"), err: "not name=url"},
		{name: "extra capabilities", args: []string{"--capability", "gpu:a100"}, env: base("FLEET_CAPABILITIES=persona:backend,gpu:a100"),
			check: func(t *testing.T, c Config) { require.Equal(t, []string{"persona:backend", "gpu:a100"}, c.ExtraCaps) }},
		{name: "bad capability", env: base("FLEET_CAPABILITIES=nokind"), err: "kind:value"},
		{name: "work dir inside repo base", env: base("FLEET_WORK_DIR=/srv/repos/.factory"), err: "must not be the repo base or inside it"},
		{name: "positional argument", args: []string{"run"}, env: base(), err: "unexpected argument"},
		{name: "log level", env: base("FLEET_LOG_LEVEL=DEBUG"),
			check: func(t *testing.T, c Config) { require.Equal(t, "debug", c.LogLevel) }},
		{name: "errors are joined", env: []string{"FLEET_SEATS=x"}, err: "FLEET_URL"},
		// Engines: the built-in presets (a bare --engine name, or
		// FLEET_ENGINE_<NAME>=preset), the watchdog settings and the price
		// table, each error naming its flag and variable.
		{name: "presets by flag and variable", args: []string{"--engine", "claude"}, env: noEngine("FLEET_ENGINE_CODEX=preset", "FLEET_ENGINE_AIDER=aider --message-file @prompt-file"),
			check: func(t *testing.T, c Config) {
				require.Equal(t, map[string]engine.Preset{"claude": engine.PresetClaude, "codex": engine.PresetCodex}, c.Presets)
				require.Equal(t, map[string]string{"claude": "claude", "codex": "codex", "aider": "aider --message-file @prompt-file"}, c.Engines)
				require.Equal(t, DefaultEngineIdle, c.EngineIdle)
				require.Equal(t, DefaultEngineExitGrace, c.EngineExitGrace)
				require.Empty(t, c.Prices)
			}},
		{name: "a template for a preset's name is a template", env: base(),
			check: func(t *testing.T, c Config) { require.Empty(t, c.Presets) }},
		{name: "settings are not engines", env: noEngine("FLEET_ENGINE_CODEX=preset", "FLEET_ENGINE_IDLE_TIMEOUT=2m", "FLEET_ENGINE_EXIT_GRACE=5s", "FLEET_ENGINE_PRICES=codex=1.25/10/0.125"),
			check: func(t *testing.T, c Config) {
				require.Equal(t, map[string]string{"codex": "codex"}, c.Engines)
				require.Equal(t, 2*time.Minute, c.EngineIdle)
				require.Equal(t, 5*time.Second, c.EngineExitGrace)
				require.Equal(t, map[string]stream.Price{"codex": {Input: 1.25, Output: 10, CachedInput: 0.125}}, c.Prices)
			}},
		{name: "flags win for the watchdog", args: []string{"--engine-idle-timeout", "90s", "--engine-exit-grace", "1s"}, env: base("FLEET_ENGINE_IDLE_TIMEOUT=2m"),
			check: func(t *testing.T, c Config) {
				require.Equal(t, 90*time.Second, c.EngineIdle)
				require.Equal(t, time.Second, c.EngineExitGrace)
			}},
		{name: "unknown preset", env: noEngine("FLEET_ENGINE_GEMINI=preset"), err: `FLEET_ENGINE_GEMINI: there is no built-in preset named "gemini"`},
		{name: "bare unknown engine", args: []string{"--engine", "gemini"}, env: base(), err: `--engine: "gemini" is not name=command, nor claude or codex`},
		{name: "bad idle", env: base("FLEET_ENGINE_IDLE_TIMEOUT=soon"), err: `--engine-idle-timeout: "soon" is not a duration`},
		{name: "zero grace", args: []string{"--engine-exit-grace", "0s"}, env: base(), err: "--engine-exit-grace: 0s must be positive"},
		{name: "price for no engine", env: base("FLEET_ENGINE_PRICES=codex=1.25/10"), err: `--engine-prices (FLEET_ENGINE_PRICES): "codex" is not a configured engine`},
		{name: "bad price", args: []string{"--engine-prices", "claude=cheap"}, env: base(), err: `--engine-prices (FLEET_ENGINE_PRICES): claude: "cheap" is not input/output`},
		// The wall budgets: the cap on every job's, and the default under it.
		{name: "max wall", env: base("FLEET_MAX_WALL=6h", "FLEET_DEFAULT_WALL=6h"),
			check: func(t *testing.T, c Config) {
				require.Equal(t, 6*time.Hour, c.MaxWall)
				require.Equal(t, 6*time.Hour, c.DefaultWall)
			}},
		{name: "bad max wall", env: base("FLEET_MAX_WALL=forever"), err: `--max-wall: "forever" is not a duration`},
		{name: "zero max wall", args: []string{"--max-wall", "0s"}, env: base(), err: "--max-wall: 0s must be positive"},
		{name: "default wall past the max", env: base("FLEET_MAX_WALL=1h"),
			err: "--default-wall (FLEET_DEFAULT_WALL) 2h0m0s is longer than --max-wall (FLEET_MAX_WALL) 1h0m0s"},
		{name: "check-engines needs no coordinator", args: []string{"--check-engines", "--engine", "codex"}, env: nil,
			check: func(t *testing.T, c Config) {
				require.True(t, c.CheckEngines)
				require.Equal(t, map[string]engine.Preset{"codex": engine.PresetCodex}, c.Presets)
			}},
		{name: "check-engines still needs an engine", args: []string{"--check-engines"}, env: nil, err: "no engine configured"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c, err := Parse(tt.args, tt.env)
			if tt.err != "" {
				require.ErrorContains(t, err, tt.err)
				return
			}
			require.NoError(t, err)
			tt.check(t, c)
		})
	}
}

// TestParseNeverEchoesToken: configuration errors name settings, never
// the secret.
func TestParseNeverEchoesToken(t *testing.T) {
	t.Parallel()
	_, err := Parse([]string{"--seats", "x"}, base("FLEET_FACTORY_TOKEN=ft_very_secret_value"))
	require.Error(t, err)
	require.NotContains(t, err.Error(), "ft_very_secret_value")
}

// TestTokenFile: the token is read from FLEET_FACTORY_TOKEN_FILE (or
// --token-file), trimmed; one source only; the file's content never shows
// in errors.
func TestTokenFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	good := filepath.Join(dir, "token")
	require.NoError(t, os.WriteFile(good, []byte("ft_from_file\n"), 0o600))
	empty := filepath.Join(dir, "empty")
	require.NoError(t, os.WriteFile(empty, []byte(" \n"), 0o600))
	noToken := func(extra ...string) []string {
		return slices.DeleteFunc(base(extra...), func(kv string) bool { return kv == "FLEET_FACTORY_TOKEN=ft_secret" })
	}
	tests := []struct {
		name string
		args []string
		env  []string
		want string
		err  string
	}{
		{name: "from the variable's file", env: noToken("FLEET_FACTORY_TOKEN_FILE=" + good), want: "ft_from_file"},
		{name: "from the flag's file", args: []string{"--token-file", good}, env: noToken(), want: "ft_from_file"},
		{name: "both sources", env: base("FLEET_FACTORY_TOKEN_FILE=" + good), err: "not both"},
		{name: "missing file", env: noToken("FLEET_FACTORY_TOKEN_FILE=" + filepath.Join(dir, "nope")), err: "FLEET_FACTORY_TOKEN_FILE"},
		{name: "empty file", env: noToken("FLEET_FACTORY_TOKEN_FILE=" + empty), err: "is empty"},
		{name: "neither", env: noToken(), err: "FLEET_FACTORY_TOKEN_FILE"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c, err := Parse(tt.args, tt.env)
			if tt.err != "" {
				require.ErrorContains(t, err, tt.err)
				require.NotContains(t, err.Error(), "ft_from_file")
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.want, c.Token)
		})
	}
}

// noEngine is base without its engine.
func noEngine(extra ...string) []string {
	return slices.DeleteFunc(base(extra...), func(kv string) bool { return kv == "FLEET_ENGINE_CLAUDE=claude -p @prompt" })
}
