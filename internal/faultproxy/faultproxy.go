// Package faultproxy is a loopback TCP proxy that injects network faults
// between a NATS client and its server.
package faultproxy

import (
	"net"
	"sync"
)

// Proxy forwards every connection it accepts to a target address. While
// blackholed it stops forwarding in both directions without closing anything:
// the peers see a silent connection, as with a lost route, and get the held-up
// bytes once healed, as TCP retransmission would deliver them.
type Proxy struct {
	ln     net.Listener
	target string

	mu        sync.Mutex
	healed    *sync.Cond
	blackhole bool
	closed    bool
	conns     map[net.Conn]struct{}
	wg        sync.WaitGroup
}

// New listens on a free loopback port and forwards to target.
func New(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	p.healed = sync.NewCond(&p.mu)
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// URL returns the proxy's address as a NATS URL.
func (p *Proxy) URL() string { return "nats://" + p.ln.Addr().String() }

// Blackhole stops forwarding, silently, until Heal.
func (p *Proxy) Blackhole() {
	p.mu.Lock()
	p.blackhole = true
	p.mu.Unlock()
}

// Heal resumes forwarding.
func (p *Proxy) Heal() {
	p.mu.Lock()
	p.blackhole = false
	p.mu.Unlock()
	p.healed.Broadcast()
}

// Close closes the listener and every connection, and waits for the proxy's
// goroutines.
func (p *Proxy) Close() {
	p.mu.Lock()
	p.closed = true
	p.blackhole = false
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.healed.Broadcast()
	p.ln.Close()
	p.wg.Wait()
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return
		}
		server, err := net.Dial("tcp", p.target)
		if err != nil {
			client.Close()
			continue
		}
		if !p.track(client, server) {
			return
		}
		p.wg.Add(2)
		go p.pipe(server, client)
		go p.pipe(client, server)
	}
}

func (p *Proxy) track(conns ...net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		for _, c := range conns {
			c.Close()
		}
		return false
	}
	for _, c := range conns {
		p.conns[c] = struct{}{}
	}
	return true
}

// pipe copies from src to dst, holding each chunk while blackholed. When
// either side ends, both are closed.
func (p *Proxy) pipe(dst, src net.Conn) {
	defer p.wg.Done()
	defer func() {
		dst.Close()
		src.Close()
	}()
	buf := make([]byte, 32*1024)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if !p.waitHealed() {
				return
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// waitHealed blocks while blackholed and reports whether the proxy is open.
func (p *Proxy) waitHealed() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for p.blackhole && !p.closed {
		p.healed.Wait()
	}
	return !p.closed
}
