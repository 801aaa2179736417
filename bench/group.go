package main

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/kvelect/election/internal/faultproxy"
)

// eventBuffer holds a group's events until a round reads them; a candidate
// reports a handful per round.
const eventBuffer = 256

// group is one election's candidates, each connected through its own fault
// proxy.
type group struct {
	candidates []candidate
	proxies    []*faultproxy.Proxy
	events     chan event
	started    time.Time
}

// newGroup connects n candidates of election to sys, none campaigning yet.
func newGroup(sys system, election string, n int) (*group, error) {
	g := &group{events: make(chan event, eventBuffer)}
	for id := range n {
		p, err := faultproxy.New(sys.serverAddr())
		if err != nil {
			g.close()
			return nil, err
		}
		g.proxies = append(g.proxies, p)
		c, err := sys.newCandidate(strings.TrimPrefix(p.URL(), "nats://"), election, id, g.events)
		if err != nil {
			g.close()
			return nil, err
		}
		g.candidates = append(g.candidates, c)
	}
	return g, nil
}

// campaign starts every candidate at once and notes the time.
func (g *group) campaign() {
	g.started = time.Now()
	for _, c := range g.candidates {
		c.campaign()
	}
}

// errTimeout says a round waited too long for an event.
var errTimeout = errors.New("no such event before the deadline")

// await returns the next event that want accepts, skipping others, or an
// error once deadline passes or a candidate fails.
func (g *group) await(deadline time.Time, what string, want func(event) bool) (event, error) {
	timer := time.NewTimer(time.Until(deadline))
	defer timer.Stop()
	for {
		select {
		case ev := <-g.events:
			if ev.kind == failed {
				return ev, fmt.Errorf("candidate %d failed waiting for %s: %w", ev.id, what, ev.err)
			}
			if want(ev) {
				return ev, nil
			}
		case <-timer.C:
			return event{}, fmt.Errorf("waiting for %s: %w", what, errTimeout)
		}
	}
}

// established starts the campaign and waits until a leader is announced and
// every candidate has begun campaigning. It returns the leader's announcement.
func (g *group) established(deadline time.Time) (event, error) {
	g.campaign()
	var leader event
	var haveLeader bool
	begun := 0
	for !haveLeader || begun < len(g.candidates) {
		ev, err := g.await(deadline, "a first leader", func(ev event) bool { return ev.kind == won || ev.kind == campaigning })
		if err != nil {
			return event{}, err
		}
		switch {
		case ev.kind == campaigning:
			begun++
		case !haveLeader:
			leader, haveLeader = ev, true
		default:
			return event{}, fmt.Errorf("candidates %d and %d both announced at cold start", leader.id, ev.id)
		}
	}
	return leader, nil
}

// close ends every candidate and proxy, reading events meanwhile so that no
// callback blocks on a full buffer.
func (g *group) close() {
	drained := make(chan struct{})
	stop := make(chan struct{})
	go func() {
		defer close(drained)
		for {
			select {
			case <-g.events:
			case <-stop:
				return
			}
		}
	}()
	var wg sync.WaitGroup
	for _, c := range g.candidates {
		wg.Go(c.close)
	}
	wg.Wait()
	for _, p := range g.proxies {
		p.Close()
	}
	close(stop)
	<-drained
}
