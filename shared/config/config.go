// Package config reads the fleet's settings from the environment, named as
// Azure app settings are named, with defaults that need no settings at all
// on one machine.
package config

import (
	"fmt"
	"github.com/gigafactory/fleet/shared/forge/github"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/gigafactory/fleet/shared/coord/echo"

	"github.com/gigafactory/fleet/shared/coord"
	"github.com/gigafactory/fleet/shared/httpapi"
	"github.com/gigafactory/fleet/shared/runlog"
	"github.com/gigafactory/fleet/shared/webhook"
)

// Setting is one environment variable the fleet reads.
type Setting struct {
	Name        string
	Default     string
	Description string
}

// Setting names.
const (
	Listen            = "FLEET_LISTEN"
	DataDir           = "FLEET_DATA_DIR"
	OperatorToken     = "FLEET_OPERATOR_TOKEN"
	LeaseTTL          = "FLEET_LEASE_TTL"
	ReaperSchedule    = "FLEET_REAPER_SCHEDULE"
	RedispatchSched   = "FLEET_REDISPATCH_SCHEDULE"
	GCSchedule        = "FLEET_GC_SCHEDULE"
	PruneSchedule     = "FLEET_PRUNE_SCHEDULE"
	PruneAfter        = "FLEET_PRUNE_AFTER"
	RedispatchAfter   = "FLEET_REDISPATCH_AFTER"
	StaleAfter        = "FLEET_STALE_AFTER"
	DownAfter         = "FLEET_DOWN_AFTER"
	CancelGrace       = "FLEET_CANCEL_GRACE"
	Preemption        = "FLEET_PREEMPTION"
	Store             = "FLEET_STORE"
	StoreFaults       = "FLEET_STORE_FAULTS"
	CosmosDatabase    = "FLEET_COSMOS_DATABASE"
	CosmosEndpoint    = "CosmosDB__accountEndpoint"
	CosmosClientID    = "CosmosDB__clientId"
	CosmosEmulator    = "FLEET_COSMOS_EMULATOR"
	CosmosKey         = "FLEET_COSMOS_KEY"
	Bus               = "FLEET_BUS"
	NATSURL           = "FLEET_NATS_URL"
	NATSListen        = "FLEET_NATS_LISTEN"
	NATSToken         = "FLEET_NATS_TOKEN"
	LocalPools        = "FLEET_LOCAL_POOLS"
	ServiceBusNS      = "ServiceBus__fullyQualifiedNamespace"
	ServiceBusClient  = "ServiceBus__clientId"
	ServiceBusTopic   = "FLEET_SERVICEBUS_TOPIC"
	LogLevel          = "FLEET_LOG_LEVEL"
	ArtifactsURL      = "FLEET_ARTIFACTS_URL"
	ArtifactsEmulator = "FLEET_ARTIFACTS_EMULATOR"
	ArtifactMaxBytes  = "FLEET_ARTIFACT_MAX_BYTES"
	MaxLogBytes       = "FLEET_MAX_LOG_BYTES"
	EchoSchedule      = "FLEET_ECHO_SCHEDULE"
	EchoBackoff       = "FLEET_ECHO_BACKOFF"
	EchoMaxBackoff    = "FLEET_ECHO_MAX_BACKOFF"
	EchoTimeout       = "FLEET_ECHO_TIMEOUT"
	EchoDialTimeout   = "FLEET_ECHO_DIAL_TIMEOUT"
	EchoTLSTimeout    = "FLEET_ECHO_TLS_TIMEOUT"
	EchoHeaderTimeout = "FLEET_ECHO_HEADER_TIMEOUT"
	EchoParallel      = "FLEET_ECHO_PARALLEL"
	EchoBreakerFails  = "FLEET_ECHO_BREAKER_FAILURES"
	EchoBreakerCool   = "FLEET_ECHO_BREAKER_COOLDOWN"
	WebhookAllowCIDRs = "FLEET_WEBHOOK_ALLOW_CIDRS"
	GitHubAPIURL      = "FLEET_GITHUB_API_URL"
	GitHubTokenFile   = "FLEET_GITHUB_TOKEN_FILE"
	GitHubToken       = "FLEET_GITHUB_TOKEN"
	GitHubSecretFile  = "FLEET_GITHUB_WEBHOOK_SECRET_FILE"
	GitHubSecret      = "FLEET_GITHUB_WEBHOOK_SECRET"
	ForgeSchedule     = "FLEET_FORGE_SCHEDULE"
	PublicURL         = "FLEET_PUBLIC_URL"

	MaxStreamsPerPrincipal = "FLEET_MAX_STREAMS_PER_PRINCIPAL"
	MaxStreams             = "FLEET_MAX_STREAMS"
	HostHTTPMode           = "FLEET_HOST_HTTP_MODE" // read by local/hostemu (hostemu.HTTPModeSetting)
)

// Settings lists every setting with its default; docs/configuration.md's
// tables for the coordinator and the local stack are this list.
var Settings = []Setting{
	{Listen, "127.0.0.1:7071", "Address the local stack serves the API on."},
	{DataDir, "./.fleet", "Where the local stack keeps its SQLite database, broker store and operator token; survives restarts."},
	{OperatorToken, "", "Operator bearer tokens: `token`, `name:token` or `name:token:productA|productB`, comma-separated. Unset locally: one is generated, kept in the data dir and printed."},
	{LeaseTTL, duration(coord.DefaultLeaseTTL), "How long a claim holds without renewal (Go duration)."},
	{ReaperSchedule, "2-59/15 * * * * *", "NCRONTAB (6 fields, seconds first) of the lease reaper. The sweeps' defaults tick in different seconds, so their work never piles up at once."},
	{RedispatchSched, "8-59/30 * * * * *", "NCRONTAB of the re-dispatch sweep."},
	{GCSchedule, "13 0 * * * *", "NCRONTAB of the git garbage-collection sweep."},
	{PruneSchedule, "9 */5 * * * *", "NCRONTAB of the stale-factory prune, which deregisters static factories silent past FLEET_PRUNE_AFTER."},
	{RedispatchAfter, duration(coord.DefaultRedispatchAfter), "A dispatched job not accepted within this is dispatched again."},
	{StaleAfter, duration(coord.DefaultStaleAfter), "A static factory silent this long is stale."},
	{DownAfter, duration(coord.DefaultDownAfter), "A static factory silent this long is down."},
	{PruneAfter, duration(coord.DefaultPruneAfter), "A static factory silent this long, and holding no lease, is deregistered by the prune timer as `DELETE /fleet/factories/{id}` would (record gone, tokens revoked). Elastic pools are never pruned. Longer than FLEET_DOWN_AFTER."},
	{CancelGrace, duration(coord.DefaultCancelGrace), "How long the holder of a cancelled or preempted job has to stop, checkpoint and release before its lease is revoked and the job cancelled (or requeued) anyway."},
	{Preemption, "on", "`off` stops critical jobs from preempting lower-priority running jobs when no eligible factory has a free seat."},
	{Store, "sqlite", "State store: `sqlite` (one machine) or `cosmos`."},
	{StoreFaults, "", "Testing only: inject store faults into a fraction of calls, e.g. `errors:0.02,latency:0.05:50ms` (2% fail as unavailable, 5% take 50ms longer). The chaos campaign (`make chaos`) sets it; never set it in production."},
	{CosmosDatabase, "fleet", "Cosmos DB database name."},
	{CosmosEndpoint, "", "Cosmos DB account endpoint; setting it selects the cosmos store."},
	{CosmosClientID, "", "Client id of the user-assigned managed identity for Cosmos DB (unset: DefaultAzureCredential)."},
	{CosmosEmulator, "", "`1` to use the Cosmos DB emulator: its well-known key and self-signed TLS (endpoint defaults to https://localhost:8081/). Never for a real account."},
	{CosmosKey, "", "Cosmos DB account key, for the emulator or a test account only (production uses managed identity; key auth is off)."},
	{Bus, "nats", "Dispatch transport: `nats`, `servicebus` or `none` (poll only)."},
	{NATSURL, "", "NATS server URL the handler publishes dispatch messages to. Unset, the local stack embeds a server and sets it; a handler with no URL publishes nothing (factories poll)."},
	{NATSListen, "127.0.0.1:4222", "Where the local stack's embedded NATS server listens; factories on this machine connect to it."},
	{NATSToken, "", "Secret the coordinator presents to the NATS server (as its token). The local stack's embedded server requires credentials: unset, the stack generates one at each start and hands it to the handler; factories present their own fleet token and may read only their own subscription. Set it for an external server that requires a token (at least 16 characters for the embedded one)."},
	{LocalPools, "", "Local stack only: a JSON file of elastic pools the stack runs as KEDA runs a Container Apps Job, starting `factory --once` executions from each pool subscription's depth (docs/local-stack.md, \"Elastic pools on one machine\")."},
	{ServiceBusNS, "", "Service Bus namespace host; setting it selects the servicebus transport."},
	{ServiceBusClient, "", "Client id of the user-assigned managed identity for Service Bus."},
	{ServiceBusTopic, "fleet-dispatch", "Service Bus topic of dispatch messages."},
	{LogLevel, "info", "debug, info, warn or error."},
	{ArtifactsURL, "", "Blob container URL for artifact bytes (`https://<account>.blob.core.windows.net/artifacts`, Terraform sets it), reached with the managed identity. Unset: a directory `blobs` under the data dir."},
	{ArtifactsEmulator, "", "`1` when the artifacts URL is Azurite's: its well-known development key, plain http, container created if missing. Never for a real account."},
	{ArtifactMaxBytes, strconv.Itoa(coord.DefaultArtifactMaxBytes), "Largest artifact upload, in bytes; more is 413 with nothing stored. Keep it under the Functions host's 100 MiB request limit."},
	{MaxLogBytes, strconv.Itoa(runlog.DefaultMaxBytes), "Most of a run's live output kept, in bytes (API.md \"Live output\"); past it the oldest eighth at a time is dropped and readers are told how much. Kept as files under the data dir (`runlogs`), or as append blobs named `runlog/…` in the artifacts container when FLEET_ARTIFACTS_URL is set."},
	{EchoSchedule, "1-59/5 * * * * *", "NCRONTAB of the tracker echo sweep, which re-drives deliveries that are due (a retry after backoff, a missing event, a lost change-feed batch)."},
	{EchoBackoff, duration(echo.DefaultBackoff), "Wait after a failed tracker webhook delivery; doubles with each failure in a row."},
	{EchoMaxBackoff, duration(echo.DefaultMaxBackoff), "Longest wait between tracker webhook delivery attempts."},
	{EchoTimeout, duration(echo.DefaultTimeout), "Timeout of one tracker webhook request."},
	{EchoDialTimeout, duration(webhook.DefaultDialTimeout), "Timeout of a tracker webhook's TCP connect."},
	{EchoTLSTimeout, duration(webhook.DefaultTLSTimeout), "Timeout of a tracker webhook's TLS handshake."},
	{EchoHeaderTimeout, duration(webhook.DefaultHeaderTimeout), "How long a tracker webhook has to start answering once a delivery is sent."},
	{EchoParallel, strconv.Itoa(echo.DefaultParallel), "Deliveries one product's echo lane runs at once; products never wait for each other's webhooks."},
	{EchoBreakerFails, strconv.Itoa(echo.DefaultBreakerFailures), "Failed deliveries in a row after which a tracker webhook is not tried for FLEET_ECHO_BREAKER_COOLDOWN (its jobs show `circuit_open`); then one delivery probes it."},
	{EchoBreakerCool, duration(echo.DefaultBreakerCooldown), "How long an open webhook breaker skips its webhook."},
	{WebhookAllowCIDRs, "", "Address ranges tracker webhooks may reach although they are not public, comma-separated CIDRs (e.g. `10.20.0.0/16,fd12::/48`). Unset: loopback, private, link-local, unique-local, CGNAT, multicast and cloud metadata addresses are refused when dialled, after DNS."},
	{GitHubAPIURL, github.DefaultAPIURL, "GitHub's REST API, for the pull requests of products with a forge (API.md \"Pull requests\"); a GitHub Enterprise Server's `https://<host>/api/v3` otherwise."},
	{GitHubTokenFile, "", "A file holding the GitHub token the coordinator opens, updates and merges pull requests with (read/write pull requests and contents). In Azure, Terraform provisions it from Key Vault as a secret. Unset: no forge client; pull request syncs fail visibly and are retried."},
	{GitHubToken, "", "The GitHub token itself, instead of FLEET_GITHUB_TOKEN_FILE (not both): in Azure a Key Vault reference Terraform sets (`github_token`), so the token is never in plain text in the app's settings."},
	{GitHubSecretFile, "", "A file holding the secret GitHub signs webhook deliveries with (X-Hub-Signature-256). Unset: POST /api/fleet/forge/github answers 503."},
	{GitHubSecret, "", "The webhook secret itself, instead of FLEET_GITHUB_WEBHOOK_SECRET_FILE (not both): in Azure a Key Vault reference Terraform sets (`github_webhook_secret`)."},
	{ForgeSchedule, "4 * * * * *", "NCRONTAB of the forge sweep, which retries pull request syncs the forge failed once their backoff is over."},
	{PublicURL, "", "The coordinator's public base URL (e.g. `https://fleet.example.com`): a job's pull request links to its page in the console. Unset: no link."},
	{MaxStreamsPerPrincipal, strconv.Itoa(httpapi.DefaultMaxStreamsPerPrincipal), "Live streams (`…/stream`) and long polls (`?wait=`) one token may hold open at once in one process; past it, 429 `throttled` with `Retry-After`, before anything is read. At most FLEET_MAX_STREAMS."},
	{MaxStreams, strconv.Itoa(httpapi.DefaultMaxStreams), "Live streams and long polls one process holds open at once, all tokens together; past it, 429 `throttled` with `Retry-After`. Keep it well under the process's open-file limit: each takes a connection (two behind the host emulator)."},
	{HostHTTPMode, "auto", "Local stack only: how the host emulator hands HTTP requests to the handler. `auto` follows host.json (proxying: streams stream); `forward` plays a Functions host without proxying (the one of non-Flex plans), which buffers every answer, so streams answer as long polls; `proxy` and `envelope` force those."},
}

// duration writes a default as a person would (90s, 5m), not as
// time.Duration.String does (1m30s, 5m0s). The coordinator's defaults are
// the one source; the settings only document and override them.
func duration(d time.Duration) string {
	if d%time.Hour == 0 {
		return fmt.Sprintf("%dh", d/time.Hour)
	}
	if d%time.Minute == 0 {
		return fmt.Sprintf("%dm", d/time.Minute)
	}
	return fmt.Sprintf("%ds", d/time.Second)
}

// Lookup reads settings: from a map first (local.settings.json Values),
// then the environment, then the default.
type Lookup struct {
	Values map[string]string
}

// Get returns the value of name.
func (l Lookup) Get(name string) string {
	if v, ok := l.Values[name]; ok && v != "" {
		return v
	}
	if v, ok := os.LookupEnv(name); ok && v != "" {
		return v
	}
	return Default(name)
}

// Default returns the documented default of a setting ("" if unknown).
func Default(name string) string {
	for _, s := range Settings {
		if s.Name == name {
			return s.Default
		}
	}
	return ""
}

// Duration reads a Go duration setting.
func (l Lookup) Duration(name string) (time.Duration, error) {
	v := l.Get(name)
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		return 0, fmt.Errorf("%s=%q: want a positive Go duration such as 90s or 5m", name, v)
	}
	return d, nil
}

// Bytes reads a positive byte count setting.
func (l Lookup) Bytes(name string) (int64, error) {
	v := l.Get(name)
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("%s=%q: want a positive number of bytes such as 52428800", name, v)
	}
	return n, nil
}

// Count reads a positive whole-number setting.
func (l Lookup) Count(name string) (int, error) {
	v := l.Get(name)
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("%s=%q: want a positive whole number such as 4", name, v)
	}
	return n, nil
}

// DataDirPath returns the absolute data directory, created if missing.
func (l Lookup) DataDirPath() (string, error) {
	dir, err := filepath.Abs(l.Get(DataDir))
	if err != nil {
		return "", fmt.Errorf("%s: %w", DataDir, err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", fmt.Errorf("%s: %w", DataDir, err)
	}
	return dir, nil
}
