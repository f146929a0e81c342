package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/gigafactory/fleet/shared/api"
)

// sseProduct is phase 6's product.
const sseProduct = "bench-sse"

// sseResult is phase 6: how long after its write an event reaches a client
// of the product's live stream.
type sseResult struct {
	Events int     `json:"events"`
	P50Ms  float64 `json:"p50Ms"`
	P90Ms  float64 `json:"p90Ms"`
	P99Ms  float64 `json:"p99Ms"`
	MaxMs  float64 `json:"maxMs"`
	// SubmitP50Ms is the median of the submit POST alone: the write the
	// event records happens inside it.
	SubmitP50Ms float64 `json:"submitP50Ms"`
}

// runSSE is phase 6: one client on GET /api/fleet/events/stream (through the
// host emulator, proxying as the Functions host does), and jobs submitted one
// at a time. Latency is from just before the submit POST to the moment the
// client has parsed the job's "submitted" event off the stream: the write,
// the watcher waking and reading the change feed, the fan-out, the flush
// and the proxy.
func (s *session) runSSE(ctx context.Context) (*sseResult, error) {
	if err := s.op.putProduct(ctx, sseProduct, []string{"sse-r"}); err != nil {
		return nil, err
	}
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// Open: no whole-request timeout on a stream.
	resp, err := s.op.fleet.Open(sctx, api.Request{Method: http.MethodGet, Path: "/events/stream", Product: sseProduct, Accept: "text/event-stream"})
	if err != nil {
		return nil, fmt.Errorf("GET /events/stream: %w", err)
	}
	defer resp.Body.Close()
	type arrival struct {
		job string
		at  time.Time
	}
	arrivals := make(chan arrival, 16)
	go func() {
		defer close(arrivals)
		rd := bufio.NewReader(resp.Body)
		var event, data string
		for {
			line, err := rd.ReadString('\n')
			if err != nil {
				return
			}
			line = strings.TrimRight(line, "\n")
			switch {
			case line == "":
				if event == "submitted" {
					var ev struct {
						JobID string `json:"jobId"`
					}
					if json.Unmarshal([]byte(data), &ev) == nil {
						arrivals <- arrival{ev.JobID, time.Now()}
					}
				}
				event, data = "", ""
			case strings.HasPrefix(line, "event: "):
				event = line[7:]
			case strings.HasPrefix(line, "data: "):
				data = line[6:]
			}
		}
	}()

	n := s.cfg.SSE
	lat := make([]time.Duration, 0, n)
	post := make([]time.Duration, 0, n)
	manifest := "---\ntitle: watched\nrepo: sse-r\ncapabilities: [os:linux]\n---\nA job for the live stream.\n"
	for range n {
		start := time.Now()
		id, err := s.op.submit(ctx, sseProduct, manifest)
		if err != nil {
			return nil, err
		}
		post = append(post, time.Since(start))
		for {
			a, ok := <-arrivals
			if !ok {
				return nil, fmt.Errorf("the event stream ended before job %s's event", id)
			}
			if a.job == id {
				lat = append(lat, a.at.Sub(start))
				break
			}
		}
	}
	res := &sseResult{Events: n, SubmitP50Ms: ms(percentile(post, 50))}
	res.P50Ms, res.P90Ms, res.P99Ms, res.MaxMs = ms(percentile(lat, 50)), ms(percentile(lat, 90)), ms(percentile(lat, 99)), ms(percentile(lat, 100))
	return res, nil
}
