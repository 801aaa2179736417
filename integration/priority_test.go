package integration

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kvelect/election"
	"github.com/kvelect/election/internal/testenv"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"
)

// listed waits until the bucket lists every one of names as a candidate of
// key k, and returns when that was first seen.
func listed(t *testing.T, b *election.Bucket, names ...string) time.Time {
	t.Helper()
	testenv.Poll(t, fmt.Sprintf("candidates %v listed", names), awaitTimeout, func() ([]string, bool) {
		var got []string
		candidates, err := b.Candidates(context.Background(), "k")
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range candidates {
			got = append(got, c.Name)
		}
		for _, name := range names {
			if !slices.Contains(got, name) {
				return got, false
			}
		}
		return got, true
	})
	return time.Now()
}

// connection opens a connection of its own to the bucket, as another
// process's.
func connection(t *testing.T, s *server.Server, bucket string) jetstream.KeyValue {
	t.Helper()
	return handles(t, s.ClientURL(), bucket, 1)[0]
}

// TestTheHighestPriorityClaimsAFreeKey releases the key with candidates of
// three priorities waiting: the highest claims it, then the next.
func TestTheHighestPriorityClaimsAFreeKey(t *testing.T) {
	t.Parallel()
	s, admin := serverWithBucket(t, "PRIORITY")
	b := openBucket(t, admin)
	g := newGroup(t, "k")
	// The holder's priority is above the others': a lower holder that
	// claimed at its start would hand the key to a higher candidate that
	// started with it.
	holder := g.add("holder", connection(t, s, "PRIORITY"), election.WithPriority(4))
	if first := g.awaitWin(); first.name != "holder" {
		t.Fatalf("%s won, want holder, alone", first.name)
	}
	high := g.add("high", connection(t, s, "PRIORITY"), election.WithPriority(3))
	g.add("mid", connection(t, s, "PRIORITY"), election.WithPriority(2))
	g.add("low", connection(t, s, "PRIORITY"), election.WithPriority(0))
	listed(t, b, "high", "mid", "low")

	holder.Stop()
	if next := g.awaitWin(); next.name != "high" {
		t.Fatalf("%s won the released key, want high (priority 3)", next.name)
	}
	high.Stop()
	if next := g.awaitWin(); next.name != "mid" {
		t.Fatalf("%s won the released key, want mid (priority 2; low has 0)", next.name)
	}
}

// TestPriorityZeroNeverLeads leaves a standby of priority 0 alone with a
// free key: it does not claim it, and a candidate that comes later does.
func TestPriorityZeroNeverLeads(t *testing.T) {
	t.Parallel()
	s, admin := serverWithBucket(t, "STANDBY")
	b := openBucket(t, admin)
	g := newGroup(t, "k")
	standby := g.add("standby", connection(t, s, "STANDBY"), election.WithPriority(0))
	listed(t, b, "standby")
	// Nothing to await: a standby that claimed would lead within
	// milliseconds of seeing the free key, and the fallback claim comes a
	// TTL after the candidate started. Wait past both.
	<-time.After(ttl + time.Second)
	if standby.IsLeader() {
		t.Fatal("a candidate of priority 0 leads")
	}
	g.add("active", connection(t, s, "STANDBY"))
	if next := g.awaitWin(); next.name != "active" {
		t.Fatalf("%s won, want active", next.name)
	}
}

func TestBadPrioritiesAreRefused(t *testing.T) {
	t.Parallel()
	_, admin := serverWithBucket(t, "BADPRIORITY")
	for name, opts := range map[string][]election.Option{
		"negative":                {election.WithPriority(-1)},
		"negative readiness":      {election.WithPreferHigher(-time.Second)},
		"priority without record": {election.WithPriority(2), election.WithoutPresence()},
		"prefer without record":   {election.WithPreferHigher(0), election.WithoutPresence()},
	} {
		if _, err := election.NewElection(context.Background(), "a", "k", admin, opts...); !errors.Is(err, election.ErrInvalidArgument) {
			t.Errorf("%s: %v, want ErrInvalidArgument", name, err)
		}
	}
	e, err := election.NewElection(context.Background(), "a", "k", admin, election.WithPriority(0))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.Once(context.Background(), 0, func(context.Context) error { return nil }); !errors.Is(err, election.ErrInvalidArgument) {
		t.Errorf("Once with priority 0: %v, want ErrInvalidArgument", err)
	}
}

// TestTheLowestBrokerIDLeads expresses the replicated-broker seed's rule,
// the lowest broker id leads, with priorities: broker N has priority 10−N
// and prefers higher priorities. Broker 1 leads; when it stops, broker 2
// does; when broker 1 returns, broker 2 hands the key back once broker 1
// has been listed for the readiness time, not before.
func TestTheLowestBrokerIDLeads(t *testing.T) {
	t.Parallel()
	const readyFor = 3 * time.Second // longer than the renewal interval, at which a leader checks
	s, admin := serverWithBucket(t, "BROKERS")
	b := openBucket(t, admin)
	g := newGroup(t, "k")
	broker := func(id int) *election.Election {
		return g.add(fmt.Sprintf("broker-%d", id), connection(t, s, "BROKERS"),
			election.WithPriority(10-id), election.WithPreferHigher(readyFor))
	}
	var brokers []*election.Election
	for id := 1; id <= 3; id++ {
		brokers = append(brokers, broker(id))
	}
	leader := g.awaitWin()
	for leader.name != "broker-1" { // one that won before broker 1 was listed hands over
		leader = g.awaitWin()
	}
	// A candidate sees the records written before its own when it first
	// claims; wait until every broker sees every other.
	listed(t, b, "broker-1", "broker-2", "broker-3")

	brokers[0].Stop()
	if next := g.awaitWin(); next.name != "broker-2" {
		t.Fatalf("%s won after broker 1 stopped, want broker-2", next.name)
	}
	broker(1)
	back := listed(t, b, "broker-1")
	returned := g.awaitWin()
	if returned.name != "broker-1" {
		t.Fatalf("%s won, want broker-1 back", returned.name)
	}
	if waited := returned.at.Sub(back); waited < readyFor {
		t.Errorf("broker 1 got the key back %v after it was listed, before the readiness time %v", waited, readyFor)
	}
	if lost := g.awaitLoss("broker-2"); !errors.Is(lost.cause, election.ErrHandedOver) {
		t.Errorf("broker 2 stood down with cause %v, want ErrHandedOver", lost.cause)
	}
}

// TestAFlappingPreferredNodeMovesTheWorkOncePerWindow hands the key to a
// preferred node, stops it, and starts it again at once: the leader does
// not hand the key over again until five readiness times after its last
// handover by preference.
func TestAFlappingPreferredNodeMovesTheWorkOncePerWindow(t *testing.T) {
	t.Parallel()
	const readyFor = time.Second
	s, admin := serverWithBucket(t, "FLAP")
	b := openBucket(t, admin)
	g := newGroup(t, "k")
	// Base has a priority of its own, so it claims after a listing window,
	// not at its start: a leader that claimed at its start would hand the
	// key at once to a higher candidate started with it, and the first move
	// would not be by preference.
	g.add("base", connection(t, s, "FLAP"), election.WithPriority(2), election.WithPreferHigher(readyFor))
	if first := g.awaitWin(); first.name != "base" {
		t.Fatalf("%s won, want base, alone", first.name)
	}
	preferred := func() *election.Election {
		return g.add("preferred", connection(t, s, "FLAP"), election.WithPriority(3), election.WithPreferHigher(readyFor))
	}
	p := preferred()
	if next := g.awaitWin(); next.name != "preferred" {
		t.Fatalf("%s won, want preferred", next.name)
	}
	moved := g.awaitLoss("base").at

	p.Stop()
	if next := g.awaitWin(); next.name != "base" {
		t.Fatalf("%s won after preferred stopped, want base", next.name)
	}
	preferred()
	listed(t, b, "preferred")
	again := g.awaitWin()
	if again.name != "preferred" {
		t.Fatalf("%s won, want preferred again", again.name)
	}
	if since := again.at.Sub(moved); since < 5*readyFor {
		t.Errorf("the key moved to the preferred node again %v after the last move, within the window %v", since, 5*readyFor)
	}
}

// TestCandidatesStartedTogetherGoToTheHighestPriority starts candidates of
// priorities 1 (the default), 2 and 3 at the same instant on a free key,
// each on a connection and a watcher of its own, many times: the candidate
// of priority 3 leads every time. Whoever leads first, the test waits for
// priority 3 to lead, then stops the others and checks that nobody led
// after it.
func TestCandidatesStartedTogetherGoToTheHighestPriority(t *testing.T) {
	t.Parallel()
	const tries = 20
	// Priority 3 leads within a listing window (a tenth of the TTL) of its
	// start, or by a handover right after; a candidate it does not reach
	// within a TTL has lost to a lower one for good.
	const settle = ttl
	s, _ := serverWithBucket(t, "TOGETHER")
	kvs := handles(t, s.ClientURL(), "TOGETHER", 3)
	firstHighest, failed := 0, 0
	for try := range tries {
		key := fmt.Sprintf("k%d", try)
		type win struct {
			name string
			at   time.Time
		}
		wins := make(chan win, 16)
		elections := make([]*election.Election, 3)
		for i := range elections {
			name := fmt.Sprintf("p%d", i+1)
			e, err := election.NewElection(context.Background(), name, key, kvs[i],
				election.WithPriority(i+1), election.WithLogger(testenv.Logger(t).With("candidate", name, "key", key)),
				election.OnWon(func() { wins <- win{name, time.Now()} }))
			if err != nil {
				t.Fatal(err)
			}
			elections[i] = e
		}
		release := make(chan struct{})
		var running sync.WaitGroup
		for _, e := range elections {
			running.Go(func() {
				<-release
				if err := e.Start(context.Background()); err != nil {
					t.Errorf("Start: %v", err)
				}
			})
		}
		started := time.Now()
		close(release)

		var order []string
		highest := false
		deadline := time.After(settle)
		for !highest {
			select {
			case w := <-wins:
				order = append(order, fmt.Sprintf("%s after %v", w.name, w.at.Sub(started).Round(time.Millisecond)))
				highest = w.name == "p3"
			case <-deadline:
				order = append(order, fmt.Sprintf("none after %v", settle))
			}
			if strings.HasPrefix(order[len(order)-1], "none") {
				break
			}
		}
		if strings.HasPrefix(order[0], "p3") {
			firstHighest++
		}
		// Stop the lower ones first: once priority 3 led, no other may
		// have led after it.
		elections[0].Stop()
		elections[1].Stop()
		for drained := false; !drained; {
			select {
			case w := <-wins:
				order = append(order, fmt.Sprintf("%s after %v", w.name, w.at.Sub(started).Round(time.Millisecond)))
			default:
				drained = true
			}
		}
		if !highest || !strings.HasPrefix(order[len(order)-1], "p3") || !elections[2].IsLeader() {
			failed++
			t.Errorf("try %d: leaders in turn %v: want priority 3 to lead within %v, and to lead still once the others stopped", try, order, settle)
		} else {
			t.Logf("try %d: leaders in turn %v", try, order)
		}
		elections[2].Stop()
		running.Wait()
	}
	t.Logf("priority 3 led in %d of %d tries, first in %d", tries-failed, tries, firstHighest)
}
