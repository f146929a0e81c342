package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"time"
)

// The hand-over floor: what one HTTP round trip between two processes
// costs on this machine with nothing else running, so phase 1's latency
// can be read against it. The dispatch path crosses between processes six
// times (client -> host, host -> handler, the store's change marker ->
// the host's change feed, host -> handler, handler -> broker, broker ->
// factory): three round trips' worth of hand-overs, none of which a
// change inside one process can remove (issue 25).
const (
	// handoffServerEnv makes the bench binary the floor's echo server.
	handoffServerEnv = "FLEET_BENCH_HANDOFF_SERVER"
	// handoffHops is the dispatch path's cross-process hand-overs.
	handoffHops = 6
	// handoffTrips is how many round trips each measurement times.
	handoffTrips = 300
	// handoffBodyBytes is about a job document's size.
	handoffBodyBytes = 1500
)

// handoffResult is the floor: round trips paced at phase 1's rate (each
// process idle between them, as on the dispatch path) and back to back.
type handoffResult struct {
	Rate        float64 `json:"ratePerSec"`
	Trips       int     `json:"trips"`
	PacedP50Ms  float64 `json:"pacedP50Ms"`
	PacedP99Ms  float64 `json:"pacedP99Ms"`
	HotP50Ms    float64 `json:"backToBackP50Ms"`
	HotP99Ms    float64 `json:"backToBackP99Ms"`
	PathHops    int     `json:"dispatchPathHops"`
	PathFloorMs float64 `json:"dispatchPathFloorP50Ms"`
}

// serveHandoff is the echo server's whole life: it answers every request
// at once with a short JSON body, on a loopback port it prints first.
func serveHandoff() error {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	fmt.Println(l.Addr().String())
	answer := []byte(`{"ok":true}`)
	return http.Serve(l, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Length", "11")
		_, _ = w.Write(answer)
	}))
}

// runHandoff starts this binary as the echo server and times round trips
// to it: handoffTrips paced at rate, then as many back to back.
func runHandoff(ctx context.Context, rate float64) (*handoffResult, error) {
	if rate <= 0 {
		return nil, errors.New("hand-over floor: the rate must be positive")
	}
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	cmd := exec.CommandContext(ctx, self)
	cmd.Env = append(os.Environ(), handoffServerEnv+"=1")
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	defer func() { cancel(); _ = cmd.Wait() }()
	addr, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		return nil, fmt.Errorf("hand-over server: no address: %w", err)
	}
	url := "http://" + strings.TrimSpace(addr) + "/"

	c := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1}}
	defer c.CloseIdleConnections()
	body := bytes.Repeat([]byte("x"), handoffBodyBytes)
	trip := func() (time.Duration, error) {
		began := time.Now()
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
		if err != nil {
			return 0, err
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := c.Do(req)
		if err != nil {
			return 0, err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return 0, fmt.Errorf("hand-over server answered %s", resp.Status)
		}
		return time.Since(began), nil
	}
	times := func(n int, gap time.Duration) ([]time.Duration, error) {
		ds := make([]time.Duration, 0, n)
		next := time.Now()
		for range n {
			if gap > 0 {
				next = next.Add(gap)
				select {
				case <-ctx.Done():
					return nil, ctx.Err()
				case <-time.After(time.Until(next)):
				}
			}
			d, err := trip()
			if err != nil {
				return nil, err
			}
			ds = append(ds, d)
		}
		return ds, nil
	}
	if _, err := times(20, 0); err != nil { // the connection, warmed
		return nil, err
	}
	paced, err := times(handoffTrips, time.Duration(float64(time.Second)/rate))
	if err != nil {
		return nil, err
	}
	hot, err := times(handoffTrips, 0)
	if err != nil {
		return nil, err
	}
	r := &handoffResult{Rate: rate, Trips: handoffTrips, PathHops: handoffHops,
		PacedP50Ms: ms(percentile(paced, 50)), PacedP99Ms: ms(percentile(paced, 99)),
		HotP50Ms: ms(percentile(hot, 50)), HotP99Ms: ms(percentile(hot, 99))}
	r.PathFloorMs = r.PacedP50Ms * handoffHops / 2
	return r, nil
}
