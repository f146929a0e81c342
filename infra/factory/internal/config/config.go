// Package config reads the factory's settings: environment variables named
// as Terraform and the README name them, each mirrored by a flag that wins
// over it. Parse is pure (it takes the arguments and the environment), so
// every rule is tested without touching the process.
package config

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gigafactory/fleet/infra/factory/internal/engine"
	"github.com/gigafactory/fleet/infra/factory/internal/engine/stream"
	"github.com/gigafactory/fleet/infra/factory/internal/logcap"
	"github.com/gigafactory/fleet/shared/fleet"
	"github.com/gigafactory/fleet/shared/secret"
)

// Environment variable names.
const (
	EnvURL                = "FLEET_URL"
	EnvFactoryID          = "FLEET_FACTORY_ID"
	EnvToken              = "FLEET_FACTORY_TOKEN"
	EnvTokenFile          = "FLEET_FACTORY_TOKEN_FILE"
	EnvProductID          = "FLEET_PRODUCT_ID"
	EnvTransport          = "FLEET_TRANSPORT"
	EnvRepoBase           = "FLEET_REPO_BASE"
	EnvRepoURLs           = "FLEET_REPO_URLS"
	EnvCapabilities       = "FLEET_CAPABILITIES"
	EnvWorkDir            = "FLEET_WORK_DIR"
	EnvSeats              = "FLEET_SEATS"
	EnvEnginePrefix       = "FLEET_ENGINE_"
	EnvEngineUser         = "FLEET_ENGINE_USER"          // a setting, not an engine named "user"
	EnvEngineUIDs         = "FLEET_ENGINE_UIDS"          // a setting, not an engine named "uids"
	EnvEngineIdle         = "FLEET_ENGINE_IDLE_TIMEOUT"  // a setting, not an engine
	EnvEngineExitGrace    = "FLEET_ENGINE_EXIT_GRACE"    // a setting, not an engine
	EnvEnginePrices       = "FLEET_ENGINE_PRICES"        // a setting, not an engine
	EnvEngineLogMax       = "FLEET_ENGINE_LOG_MAX_BYTES" // a setting, not an engine
	EnvRunCgroups         = "FLEET_RUN_CGROUPS"
	EnvDefaultEngine      = "FLEET_DEFAULT_ENGINE"
	EnvShipStage          = "FLEET_SHIP_STAGE"
	EnvShipHook           = "FLEET_SHIP_HOOK"
	EnvHeartbeat          = "FLEET_HEARTBEAT_INTERVAL"
	EnvRenew              = "FLEET_RENEW_INTERVAL"
	EnvCheckpoint         = "FLEET_CHECKPOINT_INTERVAL"
	EnvPoll               = "FLEET_POLL_INTERVAL"
	EnvGCInterval         = "FLEET_GC_INTERVAL"
	EnvDefaultWall        = "FLEET_DEFAULT_WALL"
	EnvMaxWall            = "FLEET_MAX_WALL"
	EnvKillGrace          = "FLEET_KILL_GRACE"
	EnvOnceWait           = "FLEET_ONCE_WAIT"
	EnvLogLevel           = "FLEET_LOG_LEVEL"
	EnvGitName            = "FLEET_GIT_NAME"
	EnvGitEmail           = "FLEET_GIT_EMAIL"
	EnvNATSURL            = "FLEET_NATS_URL"
	EnvSubscription       = "FLEET_SUBSCRIPTION"
	EnvServiceBusNS       = "ServiceBus__fullyQualifiedNamespace"
	EnvServiceBusClientID = "ServiceBus__clientId"
	EnvServiceBusTopic    = "FLEET_SERVICEBUS_TOPIC"
	EnvServiceBusSub      = "FLEET_SERVICEBUS_SUBSCRIPTION"
	EnvServiceBusSessions = "FLEET_SERVICEBUS_SESSIONS"
	EnvAzureClientID      = "AZURE_CLIENT_ID"
)

// Transports.
const (
	TransportPoll       = "poll"
	TransportNATS       = "nats"
	TransportServiceBus = "servicebus"
)

// Ship stages a factory may hand a finished job to.
const (
	ShipShipped = "shipped"
	ShipTesting = "testing"
)

// Defaults. The heartbeat stays well inside the coordinator's 90 s stale
// threshold even if two beats in a row are lost; the checkpoint cadence
// bounds how much work a crash can lose.
const (
	DefaultHeartbeat   = 20 * time.Second
	DefaultCheckpoint  = 5 * time.Minute
	DefaultPoll        = 5 * time.Second
	DefaultGCInterval  = time.Hour
	DefaultDefaultWall = 2 * time.Hour
	DefaultKillGrace   = 10 * time.Second
	DefaultOnceWait    = time.Minute
	// DefaultMaxWall caps a job's budget.wall, which the manifest does
	// not bound: a submitter cannot hold a seat for ever with an engine
	// that keeps printing.
	DefaultMaxWall = 24 * time.Hour
	// DefaultEngineIdle is how long an engine may write nothing at all
	// before it is stopped as hung.
	DefaultEngineIdle = 15 * time.Minute
	// DefaultEngineExitGrace is how long a structured engine may live on
	// after its final result.
	DefaultEngineExitGrace = 30 * time.Second
	DefaultTopic           = "fleet-dispatch"
	// MaxHeartbeat is the longest heartbeat interval accepted: a third of
	// the coordinator's stale threshold.
	MaxHeartbeat = 30 * time.Second
	// DefaultEngineLogMax bounds what a run keeps of its engine's output
	// in engine.log: the coordinator's default cap on a run's live log
	// (FLEET_MAX_LOG_BYTES), so it keeps all of it, and under its default
	// artifact limit.
	DefaultEngineLogMax = 32 << 20
	// MaxEngineLogMax is the largest engine.log cap accepted: a larger log
	// would be refused as an artifact by a coordinator with the default
	// FLEET_ARTIFACT_MAX_BYTES.
	MaxEngineLogMax = fleet.DefaultArtifactMaxBytes
)

// Config is everything the factory needs to run.
type Config struct {
	URL       string // coordinator base URL, without /api
	FactoryID string
	Token     string
	// TokenFile is where Token was read from, if it was.
	TokenFile string
	ProductID string // optional: sent as x-product-id on claim and heartbeat
	Transport string

	RepoBase string
	// RepoURLs maps repo names to origin URLs to clone into RepoBase when
	// missing: an elastic pool starts from an empty disk.
	RepoURLs map[string]string
	WorkDir  string

	Seats int
	// ExtraCaps are advertised beside the detected ones (e.g. gpu:a100).
	ExtraCaps []string
	// Engines maps an engine name (lower case) to its command template;
	// for a preset, to the preset's program.
	Engines map[string]string
	// Presets are the engines run as a built-in preset (claude, codex)
	// rather than a template, by name.
	Presets       map[string]engine.Preset
	DefaultEngine string
	// EngineIdle stops an engine that wrote nothing at all for this long;
	// EngineExitGrace one that gave its final result and did not exit.
	EngineIdle      time.Duration
	EngineExitGrace time.Duration
	// EngineLogMax is the most bytes of a run's output its engine.log
	// keeps (and so the live log and the artifact), and a preset's events
	// file: the first ones, and the last ones after a line saying how much
	// was left out.
	EngineLogMax int64
	// Prices price the tokens of engines that report no cost (Codex), by
	// engine name, in USD per million tokens.
	Prices map[string]stream.Price
	// CheckEngines: run each engine's version command, print what was
	// found and exit, without running a job (--check-engines). Only the
	// engine settings are required then.
	CheckEngines bool
	// EngineUser is the account engines run as (name or uid); empty runs
	// them as the factory's own user.
	EngineUser string
	// EngineUIDs, when set, gives each seat a uid of its own: a run's
	// engine runs as its seat's uid, so runs cannot reach each other's
	// files or processes. Exclusive with EngineUser.
	EngineUIDs UIDRange
	// NoRunCgroups is set when runs must not get a cgroup each
	// (FLEET_RUN_CGROUPS=off): the fallback is used instead.
	NoRunCgroups bool

	ShipStage string
	ShipHook  string

	Once     bool
	OnceWait time.Duration

	// HeartbeatEnabled is false by default with --once: replicas of an
	// elastic pool share one factory id, and each would overwrite the
	// pool's enrolled capabilities, repos and load with its own.
	HeartbeatEnabled bool
	Heartbeat        time.Duration
	Renew            time.Duration // 0: a third of the lease the claim returned
	Checkpoint       time.Duration
	Poll             time.Duration
	// GCInterval is the cadence of the factory's own origin sweep; 0 is
	// none (the default with a bus, which carries the coordinator's).
	GCInterval         time.Duration
	DefaultWall        time.Duration
	MaxWall            time.Duration // caps budget.wall; 0 is DefaultMaxWall
	KillGrace          time.Duration
	GitName, GitEmail  string
	LogLevel           string
	NATSURL            string
	Subscription       string // bus subscription; default the factory id
	ServiceBusNS       string
	ServiceBusTopic    string
	ServiceBusClientID string
	// ServiceBusSessions must match the subscriptions' provisioning.
	ServiceBusSessions bool
}

// UIDRange is an inclusive range of uids; the zero value is none.
type UIDRange struct{ First, Last uint32 }

// Size is how many uids the range holds.
func (r UIDRange) Size() int {
	if r.First == 0 {
		return 0
	}
	return int(r.Last-r.First) + 1
}

func (r UIDRange) String() string {
	if r.First == 0 {
		return ""
	}
	return fmt.Sprintf("%d-%d", r.First, r.Last)
}

// nobodyUID is the kernel's overflow uid, shared by every service that
// runs as nobody: never a seat uid, since every process of a seat uid is
// killed.
const nobodyUID = 65534

// parseUIDRange reads "first-last" or a single uid.
func parseUIDRange(s string) (UIDRange, error) {
	a, b, isRange := strings.Cut(strings.TrimSpace(s), "-")
	if !isRange {
		b = a
	}
	first, err1 := strconv.ParseUint(strings.TrimSpace(a), 10, 32)
	last, err2 := strconv.ParseUint(strings.TrimSpace(b), 10, 32)
	switch {
	case err1 != nil || err2 != nil:
		return UIDRange{}, fmt.Errorf("%q is not a uid range such as 20000-20031", s)
	case first == 0:
		return UIDRange{}, fmt.Errorf("%q includes uid 0 (root)", s)
	case last < first:
		return UIDRange{}, fmt.Errorf("%q ends before it starts", s)
	case last >= 1<<32-1:
		return UIDRange{}, fmt.Errorf("%q includes %d, which is no uid", s, uint64(1<<32-1))
	case first <= nobodyUID && nobodyUID <= last:
		return UIDRange{}, fmt.Errorf("%q includes %d (nobody), which other services share", s, nobodyUID)
	}
	return UIDRange{First: uint32(first), Last: uint32(last)}, nil
}

// multiFlag collects a repeatable name=value flag.
type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, ",") }
func (m *multiFlag) Set(v string) error { *m = append(*m, v); return nil }

// Parse reads args (without the program name) over env (NAME=value
// entries). Flags win over the environment. Errors name the flag and the
// variable at fault.
func Parse(args, env []string) (Config, error) {
	e := envMap(env)
	var c Config
	fs := flag.NewFlagSet("factory", flag.ContinueOnError)
	fs.SetOutput(io.Discard)

	var seats, heartbeat, renew, checkpoint, poll, gcInterval, defaultWall, maxWall, killGrace, onceWait, hbEnabled string
	var engines, repoURLs, extraCaps multiFlag
	var sessions, engineUIDs, runCgroups, engineIdle, engineExitGrace, prices, engineLogMax string
	fs.StringVar(&c.URL, "url", e[EnvURL], "coordinator base URL, without /api ("+EnvURL+")")
	fs.StringVar(&c.FactoryID, "factory-id", e[EnvFactoryID], "factory id ("+EnvFactoryID+")")
	fs.StringVar(&c.Token, "token", e[EnvToken], "factory token ("+EnvToken+"); prefer --token-file: flags show in ps, variables in /proc/<pid>/environ")
	fs.StringVar(&c.TokenFile, "token-file", e[EnvTokenFile], "file holding the factory token ("+EnvTokenFile+"); the safe way")
	fs.StringVar(&c.ProductID, "product", e[EnvProductID], "product sent as x-product-id ("+EnvProductID+")")
	fs.StringVar(&c.Transport, "transport", e[EnvTransport], "poll, nats or servicebus ("+EnvTransport+")")
	fs.StringVar(&c.RepoBase, "repo-base", e[EnvRepoBase], "directory with one git clone per repo ("+EnvRepoBase+")")
	fs.Var(&repoURLs, "repo-url", "name=url of a repo to clone into the repo base when missing; repeatable ("+EnvRepoURLs+")")
	fs.StringVar(&c.WorkDir, "work-dir", e[EnvWorkDir], "where mirrors, worktrees and job files live ("+EnvWorkDir+")")
	fs.StringVar(&seats, "seats", e[EnvSeats], "concurrent jobs ("+EnvSeats+")")
	fs.Var(&extraCaps, "capability", "extra capability to advertise, kind:value; repeatable ("+EnvCapabilities+", comma-separated)")
	fs.Var(&engines, "engine", "name=command template, or claude or codex for the built-in preset; repeatable ("+EnvEnginePrefix+"<NAME>, =preset for a preset)")
	fs.StringVar(&engineIdle, "engine-idle-timeout", e[EnvEngineIdle], "stop an engine that wrote nothing at all for this long ("+EnvEngineIdle+")")
	fs.StringVar(&engineExitGrace, "engine-exit-grace", e[EnvEngineExitGrace], "stop a structured engine that gave its final result and did not exit within this ("+EnvEngineExitGrace+")")
	fs.StringVar(&engineLogMax, "engine-log-max-bytes", e[EnvEngineLogMax], "most bytes of a run's output its engine.log (and a preset's events file, and the run's change.diff) keeps: the first and, after a line saying how much was left out, the last ("+EnvEngineLogMax+")")
	fs.StringVar(&prices, "engine-prices", e[EnvEnginePrices], "USD per million input/output tokens of engines that report no cost, e.g. codex=1.25/10 ("+EnvEnginePrices+", comma-separated)")
	fs.BoolVar(&c.CheckEngines, "check-engines", false, "run each engine's version command, print what was found and exit")
	fs.StringVar(&c.EngineUser, "engine-user", e[EnvEngineUser], "run engines as this user (name or uid); the factory must run as root ("+EnvEngineUser+")")
	fs.StringVar(&engineUIDs, "engine-uids", e[EnvEngineUIDs], "uid range, e.g. 20000-20031, giving each seat a uid of its own for its engine; the factory must run as root ("+EnvEngineUIDs+")")
	fs.StringVar(&runCgroups, "run-cgroups", e[EnvRunCgroups], "auto (a cgroup per run where the factory can write cgroup v2) or off (the fallback) ("+EnvRunCgroups+")")
	fs.StringVar(&c.DefaultEngine, "default-engine", e[EnvDefaultEngine], "engine for jobs that name none ("+EnvDefaultEngine+")")
	fs.StringVar(&c.ShipStage, "ship-stage", e[EnvShipStage], "stage a finished job without a review gate goes to: shipped or testing ("+EnvShipStage+")")
	fs.StringVar(&c.ShipHook, "ship-hook", e[EnvShipHook], "command template run after the result branch is pushed ("+EnvShipHook+")")
	fs.BoolVar(&c.Once, "once", false, "take at most one message, run it and exit")
	fs.StringVar(&onceWait, "once-wait", e[EnvOnceWait], "with --once, how long to wait for a message ("+EnvOnceWait+")")
	fs.StringVar(&hbEnabled, "heartbeat", "", "send heartbeats: true or false (default: true, false with --once)")
	fs.StringVar(&heartbeat, "heartbeat-interval", e[EnvHeartbeat], "heartbeat cadence, at most 30s ("+EnvHeartbeat+")")
	fs.StringVar(&renew, "renew-interval", e[EnvRenew], "lease renewal cadence; 0 = a third of the lease ("+EnvRenew+")")
	fs.StringVar(&checkpoint, "checkpoint-interval", e[EnvCheckpoint], "WIP checkpoint cadence ("+EnvCheckpoint+")")
	fs.StringVar(&poll, "poll-interval", e[EnvPoll], "claim cadence of the poll transport when idle ("+EnvPoll+")")
	fs.StringVar(&gcInterval, "gc-interval", e[EnvGCInterval], "cadence of the factory's own origin branch sweep; 0 = only on gc messages ("+EnvGCInterval+")")
	fs.StringVar(&defaultWall, "default-wall", e[EnvDefaultWall], "wall budget of jobs that set none ("+EnvDefaultWall+")")
	fs.StringVar(&maxWall, "max-wall", e[EnvMaxWall], "longest wall budget a job gets, whatever its budget.wall ("+EnvMaxWall+")")
	fs.StringVar(&killGrace, "kill-grace", e[EnvKillGrace], "SIGTERM to SIGKILL delay when stopping an engine ("+EnvKillGrace+")")
	fs.StringVar(&c.GitName, "git-name", e[EnvGitName], "committer name ("+EnvGitName+")")
	fs.StringVar(&c.GitEmail, "git-email", e[EnvGitEmail], "committer email ("+EnvGitEmail+")")
	fs.StringVar(&c.LogLevel, "log-level", e[EnvLogLevel], "debug, info, warn or error ("+EnvLogLevel+")")
	fs.StringVar(&c.NATSURL, "nats-url", e[EnvNATSURL], "NATS server URL ("+EnvNATSURL+")")
	fs.StringVar(&c.Subscription, "subscription", firstNonEmpty(e[EnvServiceBusSub], e[EnvSubscription]), "bus subscription; default the factory id ("+EnvServiceBusSub+", "+EnvSubscription+")")
	fs.StringVar(&c.ServiceBusNS, "servicebus-namespace", e[EnvServiceBusNS], "Service Bus namespace host ("+EnvServiceBusNS+")")
	fs.StringVar(&c.ServiceBusTopic, "servicebus-topic", e[EnvServiceBusTopic], "Service Bus topic ("+EnvServiceBusTopic+")")
	fs.StringVar(&sessions, "servicebus-sessions", e[EnvServiceBusSessions], "subscriptions require sessions keyed by repo: true or false ("+EnvServiceBusSessions+")")
	fs.StringVar(&c.ServiceBusClientID, "servicebus-client-id", firstNonEmpty(e[EnvServiceBusClientID], e[EnvAzureClientID]), "managed identity client id ("+EnvServiceBusClientID+", "+EnvAzureClientID+")")

	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected argument %q (every setting is a --flag or an environment variable)", fs.Arg(0))
	}

	var errs []error
	fail := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	dur := func(dst *time.Duration, name, v string, def time.Duration, allowZero bool) {
		if v == "" {
			*dst = def
			return
		}
		d, err := time.ParseDuration(v)
		switch {
		case err != nil:
			fail("--%s: %q is not a duration such as 30s or 5m", name, v)
		case d < 0 || (d == 0 && !allowZero):
			fail("--%s: %s must be positive", name, v)
		default:
			*dst = d
		}
	}
	dur(&c.Heartbeat, "heartbeat-interval", heartbeat, DefaultHeartbeat, false)
	dur(&c.Renew, "renew-interval", renew, 0, true)
	dur(&c.Checkpoint, "checkpoint-interval", checkpoint, DefaultCheckpoint, false)
	dur(&c.Poll, "poll-interval", poll, DefaultPoll, false)
	dur(&c.DefaultWall, "default-wall", defaultWall, DefaultDefaultWall, false)
	dur(&c.MaxWall, "max-wall", maxWall, DefaultMaxWall, false)
	dur(&c.KillGrace, "kill-grace", killGrace, DefaultKillGrace, false)
	dur(&c.OnceWait, "once-wait", onceWait, DefaultOnceWait, false)
	dur(&c.EngineIdle, "engine-idle-timeout", engineIdle, DefaultEngineIdle, false)
	dur(&c.EngineExitGrace, "engine-exit-grace", engineExitGrace, DefaultEngineExitGrace, false)
	c.EngineLogMax = DefaultEngineLogMax
	if engineLogMax != "" {
		n, err := strconv.ParseInt(engineLogMax, 10, 64)
		if err != nil || n < logcap.MinMax || n > MaxEngineLogMax {
			fail("--engine-log-max-bytes (%s): %q is not a number of bytes from %d to %d (the coordinator's default FLEET_ARTIFACT_MAX_BYTES: a larger engine.log would be refused as an artifact)",
				EnvEngineLogMax, engineLogMax, logcap.MinMax, MaxEngineLogMax)
		}
		c.EngineLogMax = n
	}
	if c.DefaultWall > c.MaxWall {
		fail("--default-wall (%s) %s is longer than --max-wall (%s) %s, which caps every job's wall budget", EnvDefaultWall, c.DefaultWall, EnvMaxWall, c.MaxWall)
	}
	if c.Heartbeat > MaxHeartbeat {
		fail("--heartbeat-interval: %s is too long: the coordinator marks a factory stale after 90s of silence; use at most %s", c.Heartbeat, MaxHeartbeat)
	}

	c.HeartbeatEnabled = !c.Once
	if hbEnabled != "" {
		b, err := strconv.ParseBool(hbEnabled)
		if err != nil {
			fail("--heartbeat: %q is not true or false", hbEnabled)
		}
		c.HeartbeatEnabled = b
	}

	c.Seats = 1
	if seats != "" {
		n, err := strconv.Atoi(seats)
		if err != nil || n < 1 || n > 1000 {
			fail("--seats (%s): %q is not a number between 1 and 1000", EnvSeats, seats)
		}
		c.Seats = n
	}

	if engineUIDs != "" {
		r, err := parseUIDRange(engineUIDs)
		switch {
		case err != nil:
			fail("--engine-uids (%s): %v", EnvEngineUIDs, err)
		case r.Size() < c.Seats:
			fail("--engine-uids (%s): %s holds %d uids, fewer than the %d seats (one uid per seat)", EnvEngineUIDs, r, r.Size(), c.Seats)
		case c.EngineUser != "":
			fail("--engine-uids (%s) and --engine-user (%s): give one, not both (the uid range gives each seat its own uid; the user is one account for every run)", EnvEngineUIDs, EnvEngineUser)
		default:
			c.EngineUIDs = r
		}
	}

	switch runCgroups {
	case "", "auto":
	case "off":
		c.NoRunCgroups = true
	default:
		fail("--run-cgroups (%s): %q is not auto or off", EnvRunCgroups, runCgroups)
	}

	c.URL = strings.TrimRight(strings.TrimSpace(c.URL), "/")
	required := fail
	if c.CheckEngines {
		// Checking the engines needs no coordinator.
		required = func(string, ...any) {}
	}
	if c.URL == "" {
		required("--url (%s) is required: the coordinator base URL, e.g. http://127.0.0.1:7071", EnvURL)
	} else if u, err := url.Parse(c.URL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		fail("--url (%s): %q is not an http(s) URL", EnvURL, c.URL)
	} else if strings.HasSuffix(u.Path, "/api") {
		fail("--url (%s): give the base URL without /api (got %q)", EnvURL, c.URL)
	}
	if err := fleet.ValidateName("factory id", c.FactoryID); err != nil {
		required("--factory-id (%s): %v", EnvFactoryID, err)
	}
	tok, err := secret.Resolve(secret.Setting{Value: c.Token, ValueName: "--token (" + EnvToken + ")",
		File: c.TokenFile, FileName: "--token-file (" + EnvTokenFile + ")"})
	switch {
	case err != nil:
		errs = append(errs, err)
	case tok == "":
		required("%s (a file holding the token the enrolment returned) or %s is required", EnvTokenFile, EnvToken)
	}
	c.Token = tok
	if c.ProductID != "" {
		if err := fleet.ValidateName("product", c.ProductID); err != nil {
			fail("--product (%s): %v", EnvProductID, err)
		}
	}

	if c.Transport == "" {
		c.Transport = TransportPoll
	}
	switch c.Transport {
	case TransportPoll:
	case TransportNATS:
		if c.NATSURL == "" {
			fail("--nats-url (%s) is required with the nats transport", EnvNATSURL)
		}
	case TransportServiceBus:
		if c.ServiceBusNS == "" {
			fail("--servicebus-namespace (%s) is required with the servicebus transport", EnvServiceBusNS)
		}
		if c.ServiceBusTopic == "" {
			c.ServiceBusTopic = DefaultTopic
		}
		if sessions != "" {
			b, err := strconv.ParseBool(sessions)
			if err != nil {
				fail("--servicebus-sessions (%s): %q is not true or false", EnvServiceBusSessions, sessions)
			}
			c.ServiceBusSessions = b
		}
	default:
		fail("--transport (%s): %q is not poll, nats or servicebus", EnvTransport, c.Transport)
	}
	if c.Subscription == "" {
		c.Subscription = c.FactoryID
	}
	// With a bus the coordinator's gcsweep sends GC requests; the poll
	// transport carries none, so such a factory sweeps origin itself.
	defGC := time.Duration(0)
	if c.Transport == TransportPoll {
		defGC = DefaultGCInterval
	}
	dur(&c.GCInterval, "gc-interval", gcInterval, defGC, true)

	switch c.ShipStage {
	case "":
		c.ShipStage = ShipShipped
	case ShipShipped, ShipTesting:
	default:
		fail("--ship-stage (%s): %q is not shipped or testing", EnvShipStage, c.ShipStage)
	}

	if c.RepoBase == "" {
		required("--repo-base (%s) is required: the directory holding one git clone per repo", EnvRepoBase)
	} else if abs, err := filepath.Abs(c.RepoBase); err == nil {
		c.RepoBase = abs
	}
	c.RepoURLs = map[string]string{}
	for _, kv := range append(splitList(e[EnvRepoURLs]), repoURLs...) {
		name, u, ok := strings.Cut(kv, "=")
		name, u = strings.TrimSpace(name), strings.TrimSpace(u)
		if !ok || u == "" {
			fail("--repo-url (%s): %q is not name=url", EnvRepoURLs, kv)
			continue
		}
		if err := fleet.ValidateName("repo", name); err != nil {
			fail("--repo-url (%s): %v", EnvRepoURLs, err)
			continue
		}
		c.RepoURLs[name] = u
	}
	if c.WorkDir == "" && c.FactoryID != "" {
		base, err := os.UserCacheDir()
		if err != nil {
			base = os.TempDir()
		}
		c.WorkDir = filepath.Join(base, "fleet-factory", c.FactoryID)
	}
	if abs, err := filepath.Abs(c.WorkDir); err == nil && c.WorkDir != "" {
		c.WorkDir = abs
	}
	if c.RepoBase != "" && c.WorkDir != "" && (c.WorkDir == c.RepoBase || isWithin(c.RepoBase, c.WorkDir)) {
		fail("--work-dir (%s) must not be the repo base or inside it: it would be advertised as a repo", EnvWorkDir)
	}

	for _, cp := range append(splitList(e[EnvCapabilities]), extraCaps...) {
		if err := fleet.ValidateCapability("capability", cp); err != nil {
			fail("--capability (%s): %v", EnvCapabilities, err)
			continue
		}
		if !slices.Contains(c.ExtraCaps, cp) {
			c.ExtraCaps = append(c.ExtraCaps, cp)
		}
	}

	c.Engines, c.Presets = map[string]string{}, map[string]engine.Preset{}
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		name, ok := strings.CutPrefix(k, EnvEnginePrefix)
		if !ok || name == "" || slices.Contains(engineSettings, k) {
			continue
		}
		c.addEngine(strings.ToLower(name), v, k, fail)
	}
	for _, kv := range engines {
		name, v, ok := strings.Cut(kv, "=")
		if !ok {
			if _, isPreset := engine.ParsePreset(strings.TrimSpace(kv)); !isPreset {
				fail("--engine: %q is not name=command, nor claude or codex (the built-in presets)", kv)
				continue
			}
			name, v = strings.TrimSpace(kv), engine.PresetValue
		}
		c.addEngine(strings.ToLower(strings.TrimSpace(name)), v, "--engine "+name, fail)
	}
	if len(c.Engines) == 0 {
		fail("no engine configured: --engine claude or --engine codex for a built-in preset (%sCLAUDE=preset), or %s<NAME>=<command template> (e.g. %sAIDER='aider --message-file @prompt-file') or --engine name=template", EnvEnginePrefix, EnvEnginePrefix, EnvEnginePrefix)
	}
	c.Prices = map[string]stream.Price{}
	for _, kv := range splitList(prices) {
		name, v, ok := strings.Cut(kv, "=")
		name = strings.ToLower(strings.TrimSpace(name))
		if !ok {
			fail("--engine-prices (%s): %q is not engine=input/output, e.g. codex=1.25/10", EnvEnginePrices, kv)
			continue
		}
		p, err := stream.ParsePrice(v)
		switch {
		case err != nil:
			fail("--engine-prices (%s): %s: %v", EnvEnginePrices, name, err)
		case c.Engines[name] == "":
			fail("--engine-prices (%s): %q is not a configured engine", EnvEnginePrices, name)
		default:
			c.Prices[name] = p
		}
	}
	if c.DefaultEngine == "" && len(c.Engines) > 0 {
		// Deterministic whatever the environment order: the first by name.
		c.DefaultEngine = slices.Sorted(maps.Keys(c.Engines))[0]
	} else if c.DefaultEngine != "" {
		c.DefaultEngine = strings.ToLower(c.DefaultEngine)
		if _, ok := c.Engines[c.DefaultEngine]; !ok && len(c.Engines) > 0 {
			fail("--default-engine (%s): %q is not a configured engine", EnvDefaultEngine, c.DefaultEngine)
		}
	}

	if c.GitName == "" {
		c.GitName = "fleet factory " + c.FactoryID
	}
	if c.GitEmail == "" {
		c.GitEmail = c.FactoryID + "@factory.fleet.invalid"
	}
	switch strings.ToLower(c.LogLevel) {
	case "":
		c.LogLevel = "info"
	case "debug", "info", "warn", "error":
		c.LogLevel = strings.ToLower(c.LogLevel)
	default:
		fail("--log-level (%s): %q is not debug, info, warn or error", EnvLogLevel, c.LogLevel)
	}
	return c, errors.Join(errs...)
}

// engineSettings are the FLEET_ENGINE_* variables that are settings, not
// engines.
var engineSettings = []string{EnvEngineUser, EnvEngineUIDs, EnvEngineIdle, EnvEngineExitGrace, EnvEnginePrices, EnvEngineLogMax}

// addEngine validates one engine: its name must make a valid engine:<name>
// capability, and its template must not be empty; "preset" selects the
// built-in preset of that name.
func (c *Config) addEngine(name, tmpl, source string, fail func(string, ...any)) {
	if err := fleet.ValidateCapability("engine", "engine:"+name); err != nil || strings.ContainsAny(name, ":/") {
		fail("%s: engine name %q must be lower-case letters, digits, '_' or '-'", source, name)
		return
	}
	if strings.TrimSpace(tmpl) == "" {
		fail("%s: the command template is empty", source)
		return
	}
	if strings.TrimSpace(tmpl) == engine.PresetValue {
		p, ok := engine.ParsePreset(name)
		if !ok {
			fail("%s: there is no built-in preset named %q (there are claude and codex); give a command template", source, name)
			return
		}
		c.Engines[name], c.Presets[name] = p.Program(), p
		return
	}
	delete(c.Presets, name)
	c.Engines[name] = tmpl
}

// Redacted is c safe to log: the token is replaced.
func (c Config) Redacted() Config {
	if c.Token != "" {
		c.Token = "[redacted]"
	}
	return c
}

func envMap(env []string) map[string]string {
	m := make(map[string]string, len(env))
	for _, kv := range env {
		if k, v, ok := strings.Cut(kv, "="); ok {
			m[k] = v
		}
	}
	return m
}

func firstNonEmpty(vs ...string) string {
	for _, v := range vs {
		if v != "" {
			return v
		}
	}
	return ""
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

func isWithin(dir, path string) bool {
	rel, err := filepath.Rel(dir, path)
	return err == nil && rel != "." && !strings.HasPrefix(rel, "..")
}
