package store

import "time"

// EventsTTL is how long the events container keeps an event.
const EventsTTL = 90 * 24 * time.Hour

// Container describes one store container (a Cosmos DB container, a SQLite
// table). This list is the single definition of the store's shape: the SQLite
// backend creates its tables from it, the Cosmos backend checks against it, and
// terraform/cosmos.tf mirrors it (a test in tests/ compares the two).
type Container struct {
	Name         string
	PartitionKey string // JSON path, e.g. "/productId"
	// DefaultTTL is the Cosmos default time-to-live in seconds; 0 means off.
	DefaultTTL int
	// ExcludedPaths are left out of the Cosmos index: large fields no query
	// filters on, so writes cost fewer RU.
	ExcludedPaths []string
}

// Container names.
const (
	Jobs        = "fleet_jobs"
	Runs        = "fleet_runs"
	Factories   = "fleet_factories"
	Events      = "fleet_events"
	Artifacts   = "fleet_artifacts"
	QueueStates = "fleet_queue_state"
	Products    = "fleet_products"
	// Repos holds one document per owned repo naming its product: the
	// compare-and-swap that keeps a repo to one owner.
	Repos   = "fleet_repos"
	Budgets = "fleet_budgets"
	// Profiles holds persona profiles, per product: immutable versions and
	// a latest pointer per name (profiles.go).
	Profiles = "fleet_profiles"
	Tokens   = "fleet_tokens"
	// Ledger holds one document of fleet-wide counters that let idle
	// sweeps and token revalidation cost a point read (ledger.go).
	Ledger = "fleet_ledger"
	// Echoes holds each tracked job's echo delivery state (echo.go).
	Echoes = "fleet_echo"
	// Leases holds change-feed checkpoints, the Functions host's lease
	// container (partitioned on /id as the Cosmos trigger requires).
	Leases = "leases"
)

// Containers is every container the fleet uses. The job's lease is a field
// of the job document, not a container of its own: Cosmos DB transacts only
// within one document partition, so a lease held elsewhere could disagree with
// the job's stage after a crash between two writes.
var Containers = []Container{
	{Name: Jobs, PartitionKey: "/productId", ExcludedPaths: []string{"/body/?", "/profile/body/?", "/recentEvents/*"}},
	{Name: Runs, PartitionKey: "/jobId"},
	{Name: Factories, PartitionKey: "/id"},
	{Name: Events, PartitionKey: "/jobId", DefaultTTL: int(EventsTTL / time.Second), ExcludedPaths: []string{"/data/*"}},
	{Name: Artifacts, PartitionKey: "/jobId"},
	{Name: QueueStates, PartitionKey: "/productId"},
	{Name: Products, PartitionKey: "/productId"},
	{Name: Repos, PartitionKey: "/id"},
	{Name: Budgets, PartitionKey: "/productId"},
	{Name: Profiles, PartitionKey: "/productId", ExcludedPaths: []string{"/body/?"}},
	{Name: Tokens, PartitionKey: "/id"},
	{Name: Ledger, PartitionKey: "/id"},
	{Name: Echoes, PartitionKey: "/jobId"},
	{Name: Leases, PartitionKey: "/id"},
}
