package main

import (
	"io"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// proxy forwards TCP connections from factories to the coordinator and,
// while faults are on, breaks some of the requests on them. Factories
// keep their connections alive, so the proxy decides per request (each
// read of the client's bytes), not per connection, or a long-lived
// connection would carry no fault at all. A request may be dropped (its
// bytes swallowed and the connection left silent for a while, then
// closed: a black hole), delayed, or reset (forwarded, then both sides
// reset part-way through the exchange, so the client cannot tell whether
// its call took effect).
type proxy struct {
	ln     net.Listener
	target string

	mu        sync.Mutex
	rng       *rand.Rand
	on        bool
	dropRate  float64
	delayRate float64
	maxDelay  time.Duration
	resetRate float64
	// first are the kinds the next broken requests get, before the rates
	// choose: every kind once, in a random order, as processFaults does,
	// so that a short campaign (a few hundred requests, a 1 % rate) still
	// injects each kind rather than missing one by chance.
	first                 []verdict
	conns                 map[net.Conn]struct{}
	drops, delays, resets atomic.Int64
}

func newProxy(target string, seed uint64) (*proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &proxy{ln: ln, target: target, rng: rand.New(rand.NewPCG(seed, 7)), conns: map[net.Conn]struct{}{},
		dropRate: 0.01, delayRate: 0.05, maxDelay: 800 * time.Millisecond, resetRate: 0.01,
		first: []verdict{drop, slow, reset}}
	p.rng.Shuffle(len(p.first), func(i, j int) { p.first[i], p.first[j] = p.first[j], p.first[i] })
	go p.serve()
	return p, nil
}

func (p *proxy) URL() string { return "http://" + p.ln.Addr().String() }

func (p *proxy) setFaults(on bool) {
	p.mu.Lock()
	p.on = on
	p.mu.Unlock()
}

func (p *proxy) close() {
	_ = p.ln.Close()
	p.mu.Lock()
	for c := range p.conns {
		_ = c.Close()
	}
	p.mu.Unlock()
}

type verdict int

const (
	pass verdict = iota
	drop
	slow
	reset
)

// decide draws the fate of one request and, for the ones it breaks, how
// long the fault lasts.
func (p *proxy) decide() (verdict, time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.on {
		return pass, 0
	}
	r := p.rng.Float64()
	v := pass
	switch {
	case r < p.dropRate:
		v = drop
	case r < p.dropRate+p.resetRate:
		v = reset
	case r < p.dropRate+p.resetRate+p.delayRate:
		v = slow
	}
	if v != pass && len(p.first) > 0 {
		v, p.first = p.first[0], p.first[1:]
	}
	switch v {
	case drop:
		return drop, time.Second + time.Duration(p.rng.Int64N(int64(3*time.Second)))
	case reset:
		return reset, 5*time.Millisecond + time.Duration(p.rng.Int64N(int64(200*time.Millisecond)))
	case slow:
		return slow, 50*time.Millisecond + time.Duration(p.rng.Int64N(int64(p.maxDelay)))
	}
	return pass, 0
}

func (p *proxy) track(c net.Conn, add bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if add {
		p.conns[c] = struct{}{}
	} else {
		delete(p.conns, c)
	}
}

func (p *proxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		go p.handle(c)
	}
}

// resetBoth closes both sides, the client's with an RST.
func resetBoth(c, up net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = c.Close()
	_ = up.Close()
}

func (p *proxy) handle(c net.Conn) {
	p.track(c, true)
	defer p.track(c, false)
	defer c.Close()
	up, err := net.DialTimeout("tcp", p.target, 5*time.Second)
	if err != nil {
		return
	}
	p.track(up, true)
	defer p.track(up, false)
	defer up.Close()
	done := make(chan struct{}, 2)
	go func() { p.upstream(c, up); done <- struct{}{} }()
	go func() { _, _ = io.Copy(c, up); done <- struct{}{} }()
	<-done
}

// upstream forwards the client's requests, breaking some of them.
func (p *proxy) upstream(c, up net.Conn) {
	buf := make([]byte, 64<<10)
	for {
		n, err := c.Read(buf)
		if n > 0 {
			v, d := p.decide()
			switch v {
			case drop:
				p.drops.Add(1)
				time.Sleep(d)
				_ = c.Close()
				_ = up.Close()
				return
			case slow:
				p.delays.Add(1)
				time.Sleep(d)
			case reset:
				p.resets.Add(1)
				time.AfterFunc(d, func() { resetBoth(c, up) })
			}
			if _, werr := up.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}
