package faultproxy

import (
	"io"
	"net"
	"strings"
	"testing"
	"time"
)

// proxiedLink starts a target that reads five bytes and sends them on
// received, a proxy in front of it, and a client connected through the
// proxy; all closed as the test ends.
func proxiedLink(t *testing.T) (p *Proxy, client net.Conn, received <-chan string) {
	t.Helper()
	target, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { target.Close() })
	got := make(chan string, 1)
	go func() {
		c, err := target.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		buf := make([]byte, 5)
		if _, err := io.ReadFull(c, buf); err == nil {
			got <- string(buf)
		}
	}()
	p, err = New(target.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	client, err = net.Dial("tcp", strings.TrimPrefix(p.URL(), "nats://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close() })
	return p, client, got
}

// TestHealSendsAChunkHeldForADelayAtOnce writes through a proxy that delays
// every chunk by a minute, heals it, and expects the chunk well before the
// minute is up: Heal ends the fault for bytes already held too, as the
// chaos harness's "outside faults" figures assume.
func TestHealSendsAChunkHeldForADelayAtOnce(t *testing.T) {
	p, client, received := proxiedLink(t)
	p.Delay(time.Minute)
	if _, err := client.Write([]byte("hello")); err != nil {
		t.Fatal(err)
	}
	select {
	case got := <-received:
		t.Fatalf("%q arrived while the proxy delayed it", got)
	case <-time.After(100 * time.Millisecond): // the chunk is held
	}
	p.Heal()
	select {
	case got := <-received:
		if got != "hello" {
			t.Errorf("received %q, want hello", got)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the chunk held for a one-minute delay did not arrive within 30 s of Heal")
	}
}

// TestRefuseResetsOpenAndNewConnectionsUntilHeal checks the loud cut: an
// open connection is reset, a new one is accepted and reset at once, and
// after Heal a new one is forwarded again.
func TestRefuseResetsOpenAndNewConnectionsUntilHeal(t *testing.T) {
	target, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer target.Close()
	go func() {
		for {
			c, err := target.Accept()
			if err != nil {
				return
			}
			go func() { // echo
				defer c.Close()
				io.Copy(c, c)
			}()
		}
	}()
	p, err := New(target.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	addr := strings.TrimPrefix(p.URL(), "nats://")
	echoes := func(c net.Conn) bool {
		c.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := c.Write([]byte("ping")); err != nil {
			return false
		}
		buf := make([]byte, 4)
		_, err := io.ReadFull(c, buf)
		return err == nil && string(buf) == "ping"
	}
	open, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer open.Close()
	if !echoes(open) {
		t.Fatal("no echo through the proxy before the fault")
	}
	p.Refuse()
	if echoes(open) {
		t.Error("a connection open before Refuse still carried bytes")
	}
	refused, err := net.Dial("tcp", addr)
	if err == nil {
		defer refused.Close()
		if echoes(refused) {
			t.Error("a connection made during Refuse carried bytes")
		}
	}
	p.Heal()
	healed, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer healed.Close()
	if !echoes(healed) {
		t.Error("no echo through a connection made after Heal")
	}
}

// TestAChunkSentBeforeABlackholeArrives writes through a proxy that delays
// every chunk, awaits Sent for it, then blackholes the proxy: the chunk
// still arrives after its delay, as bytes on the wire when a host dies do.
func TestAChunkSentBeforeABlackholeArrives(t *testing.T) {
	p, client, received := proxiedLink(t)
	p.Delay(200 * time.Millisecond)
	sent := p.Sent("ell")
	if _, err := client.Write([]byte("hello")); err != nil {
		t.Fatal(err)
	}
	select {
	case <-sent:
	case <-time.After(30 * time.Second):
		t.Fatal("Sent not closed 30 s after the chunk was written")
	}
	p.Blackhole()
	select {
	case got := <-received:
		if got != "hello" {
			t.Errorf("received %q, want hello", got)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the chunk sent before the blackhole did not arrive within 30 s")
	}
}

// TestLatencyDelaysEachChunkFromWhenItWasRead writes two chunks 50 ms
// apart through a proxy with a latency of 300 ms: each arrives about 300 ms
// after it was written, the second without waiting out the first's latency
// in turn (as Delay would make it: 600 ms).
func TestLatencyDelaysEachChunkFromWhenItWasRead(t *testing.T) {
	target, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer target.Close()
	arrived := make(chan time.Time, 2)
	go func() {
		c, err := target.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		buf := make([]byte, 1)
		for range 2 {
			if _, err := io.ReadFull(c, buf); err != nil {
				return
			}
			arrived <- time.Now()
		}
	}()
	p, err := New(target.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	const latency = 300 * time.Millisecond
	p.Latency(latency)
	client, err := net.Dial("tcp", strings.TrimPrefix(p.URL(), "nats://"))
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	var sent [2]time.Time
	for i := range sent {
		if i > 0 {
			time.Sleep(50 * time.Millisecond) // spaces the writes; waits for nothing
		}
		sent[i] = time.Now()
		if _, err := client.Write([]byte{'x'}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range sent {
		select {
		case at := <-arrived:
			if took := at.Sub(sent[i]); took < latency || took >= 2*latency {
				t.Errorf("chunk %d arrived %v after it was written, want from %v to under %v", i, took, latency, 2*latency)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("chunk %d did not arrive within 30 s", i)
		}
	}
}

// TestAdmitResetsAConnectionWhoseFirstChunkItRefuses: with Admit, a
// connection whose dialler's first chunk is refused is reset before the
// chunk reaches the target, and one whose first chunk is admitted carries
// it, as a gateway link admits only its own region's servers.
func TestAdmitResetsAConnectionWhoseFirstChunkItRefuses(t *testing.T) {
	admit := func(first []byte) bool { return strings.HasPrefix(string(first), "right") }
	p, client, received := proxiedLink(t)
	p.Admit(admit)
	if _, err := client.Write([]byte("wrong")); err != nil {
		t.Fatal(err)
	}
	client.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := client.Read(make([]byte, 1)); err == nil {
		t.Error("a refused connection stayed open")
	}
	select {
	case got := <-received:
		t.Errorf("the target received %q from a refused connection", got)
	case <-time.After(100 * time.Millisecond):
	}

	p, client, received = proxiedLink(t)
	p.Admit(admit)
	if _, err := client.Write([]byte("right")); err != nil {
		t.Fatal(err)
	}
	select {
	case got := <-received:
		if got != "right" {
			t.Errorf("the target received %q, want right", got)
		}
	case <-time.After(10 * time.Second):
		t.Error("an admitted connection's first chunk did not arrive")
	}
}
