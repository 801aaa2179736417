package main

import (
	"fmt"
	"math/rand/v2"
	"time"
)

// scenario is one situation measured on each system, one round at a time.
type scenario struct {
	// id names the scenario in JSON.
	id string
	// title names it in the table.
	title string
	// overlap marks the scenario whose figure is an overlap of two leaders
	// rather than a time to the next leader.
	overlap bool
	// perTTL marks the scenario whose figures are also shown as multiples of
	// the TTL.
	perTTL bool
	run    func(b *bench, sys system, g *group) (time.Duration, error)
}

// scenarios lists the scenarios in the order of a round.
var scenarios = []scenario{
	{id: "cold-start", title: "cold start → first leader", run: coldStart},
	{id: "graceful-stop", title: "graceful stop → next leader", run: gracefulStop},
	{id: "leader-crash", title: "leader crash → next leader", perTTL: true, run: leaderCrash},
	{id: "connection-hang", title: "leader's connection hangs: overlap", overlap: true, run: connectionHang},
}

// bench holds what every round needs.
type bench struct {
	ttl        time.Duration
	candidates int
	rand       *rand.Rand
}

// deadline is how long any wait of a round may take: far beyond every
// failover either system should need.
func (b *bench) deadline() time.Time { return time.Now().Add(10*b.ttl + 10*time.Second) }

// atRandomPhase waits until a random point of the leader's renewal cycle,
// counted from its announcement.
func (b *bench) atRandomPhase(sys system, leader event) {
	phase := time.Duration(b.rand.Int64N(int64(sys.renewalPeriod())))
	time.Sleep(time.Until(leader.at.Add(phase)))
}

// coldStart measures from starting every candidate of an election no one
// has held to the first leader's announcement.
func coldStart(b *bench, _ system, g *group) (time.Duration, error) {
	leader, err := g.established(b.deadline())
	if err != nil {
		return 0, err
	}
	return leader.at.Sub(g.started), nil
}

// gracefulStop measures from the leader's stop (kvelect: Election.Stop;
// etcd: Resign, then closing the session) to the next announcement.
func gracefulStop(b *bench, sys system, g *group) (time.Duration, error) {
	leader, err := g.established(b.deadline())
	if err != nil {
		return 0, err
	}
	b.atRandomPhase(sys, leader)
	start := time.Now()
	g.candidates[leader.id].resign()
	next, err := g.await(b.deadline(), "the next leader", anotherWins(leader.id))
	if err != nil {
		return 0, err
	}
	return next.at.Sub(start), nil
}

// leaderCrash closes the leader's proxy, so that its connection drops and it
// can neither reconnect nor release anything: to the server it is gone, and
// the server learns only by expiry. It measures from the cut to the next
// announcement.
func leaderCrash(b *bench, sys system, g *group) (time.Duration, error) {
	leader, err := g.established(b.deadline())
	if err != nil {
		return 0, err
	}
	b.atRandomPhase(sys, leader)
	start := time.Now()
	g.proxies[leader.id].Close()
	next, err := g.await(b.deadline(), "the next leader", anotherWins(leader.id))
	if err != nil {
		return 0, err
	}
	return next.at.Sub(start), nil
}

// connectionHang blackholes the leader's proxy: its connection stays open
// but nothing passes either way. It returns for how long the old leader
// still believed it led after the next leader was announced (0 if it had
// stood down before).
func connectionHang(b *bench, sys system, g *group) (time.Duration, error) {
	leader, err := g.established(b.deadline())
	if err != nil {
		return 0, err
	}
	b.atRandomPhase(sys, leader)
	g.proxies[leader.id].Blackhole()
	deadline := b.deadline()
	var next, down *event
	for next == nil || down == nil {
		ev, err := g.await(deadline, "the next leader and the old one standing down", func(ev event) bool {
			return ev.kind == won && ev.id != leader.id || ev.kind == lost && ev.id == leader.id
		})
		if err != nil {
			return 0, err
		}
		if ev.kind == won {
			next = &ev
		} else {
			down = &ev
		}
	}
	return max(0, down.at.Sub(next.at)), nil
}

// anotherWins accepts an announcement by any candidate but the old leader.
func anotherWins(old int) func(event) bool {
	return func(ev event) bool { return ev.kind == won && ev.id != old }
}

// runRound runs one round of sc on sys with a fresh group of candidates.
func (b *bench) runRound(sc scenario, sys system, round int) (time.Duration, error) {
	g, err := newGroup(sys, fmt.Sprintf("%s-%d", sc.id, round), b.candidates)
	if err != nil {
		return 0, err
	}
	defer g.close()
	return sc.run(b, sys, g)
}
