package main

import (
	"fmt"
	"io"
	"text/tabwriter"
)

// The request-unit model: what Azure Cosmos DB (API for NoSQL, session
// consistency, default indexing) would charge for the operations the bench
// counted. Sources (Microsoft Learn, read November 2026):
//
//   - "Understand request unit consumption",
//     https://learn.microsoft.com/azure/cosmos-db/understand-request-unit-consumption:
//     the table of a read and a write by document size (ruBySize below;
//     read figures for session and eventual consistency).
//   - "Optimize request cost in Azure Cosmos DB",
//     https://learn.microsoft.com/azure/cosmos-db/optimize-cost-reads-writes:
//     a point read of a 1 KB item is 1 RU; a query's charge depends on the
//     items it loads and returns, index lookups and compilation, and a
//     query's pages add up to the whole query's charge. No per-page figure
//     is published.
//
// Our assumption for what has no published figure: a query page and a
// change-feed page each cost queryPageRU (a small filtered query is charged
// about that), and a feed page adds a read of each document it carries.
// Every document is charged at the size of a shipped job, the largest
// document a lifecycle writes; every write kind (create, replace, upsert,
// delete, patch) as a write.
type ruRow struct {
	kb, read, write float64
}

var ruBySize = []ruRow{
	{1, 1.00, 4.95}, {2, 1.04, 6.29}, {4, 1.14, 6.67}, {8, 1.33, 7.04}, {16, 1.67, 9.52},
	{32, 2.19, 11.23}, {64, 4.76, 22.67}, {128, 9.95, 48.19}, {256, 20.28, 98.29},
	{512, 40.95, 184.57}, {1024, 145.90, 625.00}, {2048, 291.80, 1250.00},
}

// queryPageRU is the assumed charge of one query or change-feed page.
const queryPageRU = 2.3

// ruFor is the read and write charge of a document of bytes bytes: the
// table's row for up to 1 KB, linear between rows above.
func ruFor(bytes int) (read, write float64) {
	kb := float64(bytes) / 1024
	if kb <= ruBySize[0].kb {
		return ruBySize[0].read, ruBySize[0].write
	}
	for i := 1; i < len(ruBySize); i++ {
		lo, hi := ruBySize[i-1], ruBySize[i]
		if kb <= hi.kb {
			f := (kb - lo.kb) / (hi.kb - lo.kb)
			return lo.read + f*(hi.read-lo.read), lo.write + f*(hi.write-lo.write)
		}
	}
	last := ruBySize[len(ruBySize)-1]
	return last.read * kb / last.kb, last.write * kb / last.kb
}

// ruCost is a request-unit estimate, by operation kind.
type ruCost struct {
	Reads     float64 `json:"reads"`
	Writes    float64 `json:"writes"`
	Queries   float64 `json:"queries"`
	FeedReads float64 `json:"feedReads"` // pages and the documents they carry
	Total     float64 `json:"total"`
}

func estimate(k kinds, feedDocs float64, docBytes int) ruCost {
	read, write := ruFor(docBytes)
	c := ruCost{Reads: k.Reads * read, Writes: k.Writes * write, Queries: k.Queries * queryPageRU,
		FeedReads: k.FeedReads*queryPageRU + feedDocs*read}
	c.Total = c.Reads + c.Writes + c.Queries + c.FeedReads
	return c
}

// costResult is the estimate of one lifecycle and of an idle day.
type costResult struct {
	DocBytes int     `json:"documentBytes"`
	ReadRU   float64 `json:"readRU"`
	WriteRU  float64 `json:"writeRU"`
	PageRU   float64 `json:"queryOrFeedPageRU"`
	// Lifecycle is phase 3's operations per lifecycle, priced.
	Lifecycle ruCost `json:"lifecycle"`
	// IdleDay is the idle window's operations × (1 day / its length),
	// heartbeats (writes by design) apart in HeartbeatsDay.
	IdleDay       ruCost  `json:"idleDayWithoutHeartbeats"`
	HeartbeatsDay float64 `json:"idleDayHeartbeats"`
	IdleFactories int     `json:"idleFactories"`
	IdleSeconds   float64 `json:"idleSeconds"`
}

// costs prices what phases 3 and 4 measured; nil without both.
func (r *results) costs() *costResult {
	l, i := r.Lifecycle, r.Idle
	if l == nil || i == nil || r.JobBytes == 0 {
		return nil
	}
	read, write := ruFor(r.JobBytes)
	c := &costResult{DocBytes: r.JobBytes, ReadRU: read, WriteRU: write, PageRU: queryPageRU,
		IdleFactories: i.Factories, IdleSeconds: i.Seconds}
	c.Lifecycle = estimate(l.PerLifecycle.Total, float64(l.FeedDocuments)/float64(l.Lifecycles), r.JobBytes)
	perDay := 86400 / i.Seconds
	idle := count(i.Ops.Total())
	writes := idle.Writes
	idle.Writes = 0
	for _, v := range []*float64{&idle.Reads, &idle.Queries, &idle.FeedReads} {
		*v *= perDay
	}
	c.IdleDay = estimate(idle, 0, r.JobBytes)
	c.HeartbeatsDay = writes * perDay * write
	return c
}

func printCosts(out io.Writer, c *costResult) {
	fmt.Fprintf(out, "\nCosmos DB request units, estimated from the operations counted (model and sources: tests/bench/README.md):\n"+
		"documents priced at a shipped job's %d B: point read %.2f RU, write %.2f RU; a query or change-feed page %.1f RU, plus a read per feed document\n",
		c.DocBytes, c.ReadRU, c.WriteRU, c.PageRU)
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "WHAT\treads\twrites\tqueries\tfeed reads\tRU\t")
	row := func(name string, k ruCost) {
		fmt.Fprintf(tw, "%s\t%.1f\t%.1f\t%.1f\t%.1f\t%.1f\t\n", name, k.Reads, k.Writes, k.Queries, k.FeedReads, k.Total)
	}
	row("one lifecycle (phase 3)", c.Lifecycle)
	row(fmt.Sprintf("an idle day, heartbeats apart (the %.0f s window x %.0f)", c.IdleSeconds, 86400/c.IdleSeconds), c.IdleDay)
	fmt.Fprintf(tw, "an idle day's heartbeats (%d factories, every %s)\t\t%.1f\t\t\t%.1f\t\n", c.IdleFactories, heartbeatEvery, c.HeartbeatsDay, c.HeartbeatsDay)
	_ = tw.Flush()
	fmt.Fprintln(out, "Not in these figures: Azure's Cosmos DB trigger polls the change feed and renews its leases whatever happens (docs/performance.md);\n"+
		"the local emulator waits on the SQLite change marker instead.")
}
