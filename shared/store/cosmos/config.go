package cosmos

import (
	"errors"
	"fmt"
	"net/url"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
)

// EmulatorKey is the account key every Azure Cosmos DB emulator accepts. It is
// published in Microsoft's emulator documentation and grants nothing outside
// a local emulator, so it is not a secret.
const EmulatorKey = "C2y6yDjf5/R+ob0N8A7Cgv30VRDJIWEHLM+4QDU5DE2nQ9nDuVTqobD4b8mGGyPMbIZnqyMsEcaGQy67XIw/Jw=="

// Defaults applied by New to zero-valued Config fields.
const (
	DefaultOperationTimeout   = 10 * time.Second
	DefaultThrottleRetries    = 9
	DefaultMaxRetryAfter      = 30 * time.Second
	DefaultUnavailableRetries = 3
	DefaultUnavailableBackoff = 200 * time.Millisecond
	DefaultPageSize           = 100
)

// Config configures the Cosmos DB store. It is a plain struct so that the
// config package (which reads the Azure app settings) and tests can build it
// without this package knowing about environment variables.
type Config struct {
	// Endpoint is the account endpoint, e.g. https://acct.documents.azure.com:443/
	// (the app setting CosmosDB__accountEndpoint).
	Endpoint string
	// Database is the database holding the store.Containers.
	Database string

	// ClientID selects a user-assigned managed identity by client id. Empty
	// means DefaultAzureCredential (developer logins, workload identity,
	// system-assigned identity). Ignored when Key or Emulator is set.
	ClientID string
	// Key is an account key. Production accounts have key auth disabled
	// (terraform/cosmos.tf); this exists for the emulator and for test
	// accounts. With Emulator set and Key empty, EmulatorKey is used.
	Key string
	// Emulator selects the local emulator: key auth (EmulatorKey unless Key
	// is set) and a transport that skips TLS verification, because the
	// emulator serves a self-signed certificate. Never set it for a real
	// account.
	Emulator bool
	// Credential overrides the credential chosen from ClientID. Optional.
	Credential azcore.TokenCredential

	// OperationTimeout bounds every store call whose context has no deadline
	// of its own, retries included. Default DefaultOperationTimeout.
	OperationTimeout time.Duration
	// ThrottleRetries is how many times a request answered 429 (or 449
	// RetryWith) is retried after the server's Retry-After delay. 0 means
	// DefaultThrottleRetries; negative disables these retries.
	ThrottleRetries int
	// MaxRetryAfter caps one Retry-After wait; a server asking for longer
	// gets ErrThrottled at once rather than a stalled caller. Default
	// DefaultMaxRetryAfter.
	MaxRetryAfter time.Duration
	// UnavailableRetries is how many times a read (point read, query page,
	// change-feed read) answered 503 is retried. Writes are never retried on
	// 503: the write may have been applied, and replaying a Create, a CAS
	// Replace or an Increment would turn a success into ErrExists,
	// ErrPrecondition or a double increment. 0 means
	// DefaultUnavailableRetries; negative disables them.
	UnavailableRetries int
	// UnavailableBackoff is the first wait between 503 retries when the
	// server sends no Retry-After; it doubles per attempt. Default
	// DefaultUnavailableBackoff.
	UnavailableBackoff time.Duration
	// PageSize is the page size of queries with Limit 0 and of change-feed
	// reads with max <= 0. Default DefaultPageSize.
	PageSize int
	// PreferredRegions orders the account's regions for reads and failover.
	PreferredRegions []string

	// Transport replaces the HTTP transport (tests, proxies). With Emulator
	// set it replaces the TLS-skipping transport too.
	Transport policy.Transporter
}

// withDefaults validates c and fills in defaults.
func (c Config) withDefaults() (Config, error) {
	if c.Endpoint == "" {
		return c, errors.New("cosmos: config: Endpoint is required")
	}
	u, err := url.Parse(c.Endpoint)
	if err != nil {
		return c, fmt.Errorf("cosmos: config: Endpoint %q: %w", c.Endpoint, err)
	}
	if u.Host == "" {
		return c, fmt.Errorf("cosmos: config: Endpoint %q has no host", c.Endpoint)
	}
	switch u.Scheme {
	case "https":
	case "http":
		// Only the emulator (vNext, --protocol http) legitimately speaks
		// plain HTTP; anywhere else it would put key signatures or bearer
		// tokens on the wire in the clear.
		if !c.Emulator {
			return c, fmt.Errorf("cosmos: config: Endpoint %q: plain http is only allowed for the emulator", c.Endpoint)
		}
	default:
		return c, fmt.Errorf("cosmos: config: Endpoint %q: scheme must be https", c.Endpoint)
	}
	if c.Database == "" {
		return c, errors.New("cosmos: config: Database is required")
	}
	if c.Emulator && c.Key == "" {
		c.Key = EmulatorKey
	}
	if c.OperationTimeout <= 0 {
		c.OperationTimeout = DefaultOperationTimeout
	}
	switch {
	case c.ThrottleRetries == 0:
		c.ThrottleRetries = DefaultThrottleRetries
	case c.ThrottleRetries < 0:
		c.ThrottleRetries = 0
	}
	if c.MaxRetryAfter <= 0 {
		c.MaxRetryAfter = DefaultMaxRetryAfter
	}
	switch {
	case c.UnavailableRetries == 0:
		c.UnavailableRetries = DefaultUnavailableRetries
	case c.UnavailableRetries < 0:
		c.UnavailableRetries = 0
	}
	if c.UnavailableBackoff <= 0 {
		c.UnavailableBackoff = DefaultUnavailableBackoff
	}
	if c.PageSize <= 0 {
		c.PageSize = DefaultPageSize
	}
	return c, nil
}
