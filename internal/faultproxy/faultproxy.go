// Package faultproxy is a loopback TCP proxy that injects network faults
// between a NATS client and its server.
package faultproxy

import (
	"bytes"
	"net"
	"sync"
	"time"
)

// Proxy forwards every connection it accepts to a target address. Its faults
// hold bytes rather than drop them: a blackholed peer sees a silent
// connection, as with a lost route, and gets the held-up bytes once healed, as
// TCP retransmission would deliver them.
type Proxy struct {
	ln     net.Listener
	target string

	mu      sync.Mutex
	changed *sync.Cond
	hold    [2]bool // by direction: toServer, toClient
	refuse  bool    // every connection is reset, open or new (Refuse)
	delay   time.Duration
	latency time.Duration
	healed  chan struct{} // closed, and replaced, by every Heal and by Close
	closed  bool
	conns   map[net.Conn]struct{}
	wg      sync.WaitGroup
	awaited []awaitedChunk          // Sent's, until seen
	admit   func(first []byte) bool // Admit's; nil admits every connection
}

// Admit makes the proxy show admit the first chunk each new connection's
// dialler sends (a NATS CONNECT) and reset the connection when it returns
// false: a link that only the right dialler may use.
func (p *Proxy) Admit(admit func(first []byte) bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.admit = admit
}

// awaitedChunk is a Sent: text, and the channel closed once it is seen.
type awaitedChunk struct {
	text []byte
	sent chan struct{}
}

const (
	toServer = 0
	toClient = 1
)

// New listens on a free loopback port and forwards to target.
func New(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{ln: ln, target: target, conns: map[net.Conn]struct{}{}, healed: make(chan struct{})}
	p.changed = sync.NewCond(&p.mu)
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// URL returns the proxy's address as a NATS URL.
func (p *Proxy) URL() string { return "nats://" + p.ln.Addr().String() }

// Blackhole stops forwarding in both directions, silently, until Heal.
func (p *Proxy) Blackhole() { p.set(func() { p.hold = [2]bool{true, true} }) }

// HalfOpen stops forwarding from the server to the client only, until Heal:
// the client's writes arrive, but it hears nothing back.
func (p *Proxy) HalfOpen() { p.set(func() { p.hold = [2]bool{false, true} }) }

// Delay holds every chunk for d before forwarding it, until Heal: each
// chunk in turn, so a burst waits longer.
func (p *Proxy) Delay(d time.Duration) { p.set(func() { p.delay = d }) }

// Latency forwards every chunk d after the proxy read it, until Heal: each
// chunk on its own, without waiting behind the one before, as a network
// link's latency does. A connection that has carried a chunk under a
// latency goes on forwarding through a writer of its own, in order.
func (p *Proxy) Latency(d time.Duration) { p.set(func() { p.latency = d }) }

// Sent returns a channel closed once a chunk from a client holding text
// has passed the faults toward the server: it reaches the server (after
// the delay set when it passed) whatever fault comes next, as bytes already
// on the wire would.
func (p *Proxy) Sent(text string) <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	a := awaitedChunk{text: []byte(text), sent: make(chan struct{})}
	p.awaited = append(p.awaited, a)
	return a.sent
}

// passedLocked closes the channel of every Sent whose text chunk holds;
// p.mu must be held.
func (p *Proxy) passedLocked(chunk []byte) {
	kept := p.awaited[:0]
	for _, a := range p.awaited {
		if bytes.Contains(chunk, a.text) {
			close(a.sent)
		} else {
			kept = append(kept, a)
		}
	}
	p.awaited = kept
}

// Refuse resets every open connection and every new one at once, until
// Heal: a loud cut, which both ends notice at once (a host that is down,
// or a firewall that rejects).
func (p *Proxy) Refuse() {
	p.set(func() { p.refuse = true })
	p.Reset()
}

// Heal ends every fault: forwarding resumes without delay, and a chunk
// being held for a Delay goes at once.
func (p *Proxy) Heal() {
	p.set(func() {
		p.hold = [2]bool{}
		p.refuse = false
		p.delay, p.latency = 0, 0
		p.releaseHeldLocked()
	})
}

// Reset closes every open connection abruptly (with a TCP reset); new
// connections are forwarded as before.
func (p *Proxy) Reset() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		resetConn(c)
		delete(p.conns, c)
	}
}

// resetConn closes c with a TCP reset.
func resetConn(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		tc.SetLinger(0)
	}
	c.Close()
}

// Close closes the listener and every connection, and waits for the proxy's
// goroutines.
func (p *Proxy) Close() {
	p.set(func() {
		p.closed = true
		p.releaseHeldLocked()
		for c := range p.conns {
			c.Close()
		}
	})
	p.ln.Close()
	p.wg.Wait()
}

// releaseHeldLocked sends every chunk held for a delay at once; p.mu must be
// held.
func (p *Proxy) releaseHeldLocked() {
	close(p.healed)
	p.healed = make(chan struct{})
}

func (p *Proxy) set(change func()) {
	p.mu.Lock()
	change()
	p.mu.Unlock()
	p.changed.Broadcast()
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return
		}
		if p.refusing() {
			resetConn(client)
			continue
		}
		server, err := net.Dial("tcp", p.target)
		if err != nil {
			client.Close()
			continue
		}
		if p.refusing() { // Refuse came while it dialled the target
			resetConn(client)
			resetConn(server)
			continue
		}
		if !p.track(client, server) {
			return
		}
		p.wg.Add(2)
		go p.pipe(server, client, toServer)
		go p.pipe(client, server, toClient)
	}
}

// refusing reports whether the proxy refuses connections (Refuse).
func (p *Proxy) refusing() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.refuse
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

// pipe copies from src to dst in one direction, applying the faults to each
// chunk. When either side ends, both are closed.
func (p *Proxy) pipe(dst, src net.Conn, direction int) {
	defer p.wg.Done()
	var late *lateWriter
	defer func() {
		dst.Close()
		src.Close()
		if late != nil {
			late.stop()
		}
		p.mu.Lock()
		delete(p.conns, dst)
		delete(p.conns, src)
		p.mu.Unlock()
	}()
	buf := make([]byte, 32*1024)
	first := direction == toServer
	for {
		n, err := src.Read(buf)
		if n > 0 && first {
			first = false
			p.mu.Lock()
			admit := p.admit
			p.mu.Unlock()
			if admit != nil && !admit(buf[:n]) {
				resetConn(src)
				resetConn(dst)
				return
			}
		}
		if n > 0 {
			read := time.Now()
			delay, latency, healed, open := p.wait(direction, buf[:n])
			if !open {
				return
			}
			if latency > 0 && late == nil {
				late = newLateWriter(dst)
			}
			switch {
			case late != nil: // once a chunk went late, every later one follows it, in order
				if !late.send(lateChunk{b: append([]byte(nil), buf[:n]...), due: read.Add(latency), delay: delay, healed: healed}) {
					return
				}
			default:
				if delay > 0 {
					holdFor(delay, healed)
				}
				if _, werr := dst.Write(buf[:n]); werr != nil {
					return
				}
			}
		}
		if err != nil {
			return
		}
	}
}

// lateChunk is a chunk a lateWriter writes at due, after holding it for
// delay, or at once when healed is closed.
type lateChunk struct {
	b      []byte
	due    time.Time
	delay  time.Duration
	healed <-chan struct{}
}

// lateWriter writes the chunks of a connection under a Latency, each when
// it is due, while the pipe reads on: a chunk does not wait out the latency
// of the one before it.
type lateWriter struct {
	chunks chan lateChunk
	done   chan struct{} // closed by stop
	exited chan struct{} // closed when the writer has returned
}

func newLateWriter(dst net.Conn) *lateWriter {
	w := &lateWriter{chunks: make(chan lateChunk, 64), done: make(chan struct{}), exited: make(chan struct{})}
	go func() {
		defer close(w.exited)
		for {
			select {
			case c := <-w.chunks:
				holdFor(time.Until(c.due), c.healed)
				holdFor(c.delay, c.healed)
				if _, err := dst.Write(c.b); err != nil {
					return
				}
			case <-w.done:
				return
			}
		}
	}()
	return w
}

// send queues c, and reports false if the writer has returned (its write
// failed).
func (w *lateWriter) send(c lateChunk) bool {
	select {
	case w.chunks <- c:
		return true
	case <-w.exited:
		return false
	}
}

// stop ends the writer and waits for it; chunks not yet written are
// dropped, as the connection is closing.
func (w *lateWriter) stop() {
	close(w.done)
	<-w.exited
}

// wait blocks while the direction is held, then returns the delay and the
// latency to apply to chunk, a channel closed by the next Heal, and whether
// the proxy is still open.
func (p *Proxy) wait(direction int, chunk []byte) (time.Duration, time.Duration, <-chan struct{}, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for p.hold[direction] && !p.closed {
		p.changed.Wait()
	}
	if direction == toServer && !p.closed {
		p.passedLocked(chunk)
	}
	return p.delay, p.latency, p.healed, !p.closed
}

// holdFor waits for d (none if it is not positive), or until healed is
// closed.
func holdFor(d time.Duration, healed <-chan struct{}) {
	if d <= 0 {
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-healed:
	}
}
