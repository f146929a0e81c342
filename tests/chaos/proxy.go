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
// while faults are on, breaks some of them: a new connection may be
// dropped (closed at once), delayed, or reset (RST) part-way through.
type proxy struct {
	ln     net.Listener
	target string

	mu                    sync.Mutex
	rng                   *rand.Rand
	on                    bool
	dropRate              float64
	delayRate             float64
	delay                 time.Duration
	resetRate             float64
	conns                 map[net.Conn]struct{}
	drops, delays, resets atomic.Int64
}

func newProxy(target string, seed uint64) (*proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &proxy{ln: ln, target: target, rng: rand.New(rand.NewPCG(seed, 7)), conns: map[net.Conn]struct{}{},
		dropRate: 0.03, delayRate: 0.10, delay: 300 * time.Millisecond, resetRate: 0.03}
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

func (p *proxy) decide() verdict {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.on {
		return pass
	}
	r := p.rng.Float64()
	switch {
	case r < p.dropRate:
		return drop
	case r < p.dropRate+p.resetRate:
		return reset
	case r < p.dropRate+p.resetRate+p.delayRate:
		return slow
	}
	return pass
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

func (p *proxy) handle(c net.Conn) {
	p.track(c, true)
	defer p.track(c, false)
	defer c.Close()
	v := p.decide()
	switch v {
	case drop:
		p.drops.Add(1)
		return
	case slow:
		p.delays.Add(1)
		time.Sleep(p.delay)
	}
	up, err := net.DialTimeout("tcp", p.target, 5*time.Second)
	if err != nil {
		return
	}
	p.track(up, true)
	defer p.track(up, false)
	defer up.Close()
	if v == reset {
		// Let the request through, then reset both sides mid-exchange: the
		// client cannot tell whether its call took effect.
		p.resets.Add(1)
		go func() {
			time.Sleep(time.Duration(5+p.rngInt(200)) * time.Millisecond)
			if tc, ok := c.(*net.TCPConn); ok {
				_ = tc.SetLinger(0)
			}
			_ = c.Close()
			_ = up.Close()
		}()
	}
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(up, c); done <- struct{}{} }()
	go func() { _, _ = io.Copy(c, up); done <- struct{}{} }()
	<-done
}

func (p *proxy) rngInt(n int) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.rng.IntN(n)
}
