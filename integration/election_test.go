package integration

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/kvelect/election"
	"github.com/kvelect/election/internal/faultproxy"
	"github.com/kvelect/election/internal/testenv"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"
)

const ttl = 2 * time.Second

// serverWithBucket starts a server and creates bucket on it with the TTL ttl.
func serverWithBucket(t *testing.T, bucket string) (*server.Server, jetstream.KeyValue) {
	t.Helper()
	return serverWith(t, jetstream.KeyValueConfig{Bucket: bucket, TTL: ttl})
}

// serverWith starts a server with the bucket cfg describes.
func serverWith(t *testing.T, cfg jetstream.KeyValueConfig) (*server.Server, jetstream.KeyValue) {
	t.Helper()
	s := testenv.Server(t)
	_, js := testenv.Connect(t, s.ClientURL())
	return s, testenv.Bucket(t, js, cfg)
}

// handles opens n connections to url and binds each to bucket.
func handles(t *testing.T, url, bucket string, n int) []jetstream.KeyValue {
	t.Helper()
	kvs := make([]jetstream.KeyValue, n)
	for i := range kvs {
		_, js := testenv.Connect(t, url)
		kv, err := js.KeyValue(context.Background(), bucket)
		if err != nil {
			t.Fatal(err)
		}
		kvs[i] = kv
	}
	return kvs
}

func TestManyCandidatesOneLeaderAndKeyDeleteFailsOver(t *testing.T) {
	t.Parallel()
	s, admin := serverWithBucket(t, "MANY")

	main := startGroup(t, "main", "main", handles(t, s.ClientURL(), "MANY", 10))
	other := startGroup(t, "other", "other", handles(t, s.ClientURL(), "MANY", 3))

	otherLeader := other.awaitWin()
	leader := main.awaitWin()
	if got := main.leaders(); len(got) != 1 || got[0] != leader.name {
		t.Fatalf("after %s won, leaders are %v", leader.name, got)
	}

	for range 3 {
		if err := admin.Delete(context.Background(), "main"); err != nil {
			t.Fatal(err)
		}
		lost := main.awaitLoss(leader.name)
		if !errors.Is(lost.cause, election.ErrRevisionGone) {
			t.Errorf("%s stood down with cause %v, want ErrRevisionGone", leader.name, lost.cause)
		}
		next := main.awaitWin()
		if next.token <= leader.token {
			t.Errorf("token went from %d to %d; tokens must grow", leader.token, next.token)
		}
		if got := main.leaders(); len(got) != 1 || got[0] != next.name {
			t.Fatalf("after %s won, leaders are %v", next.name, got)
		}
		leader = next
	}

	if got := other.leaders(); len(got) != 1 || got[0] != otherLeader.name {
		t.Errorf("the election on another key changed leader: %v, was %s", got, otherLeader.name)
	}
	select {
	case ev := <-other.events:
		t.Errorf("the election on another key was disturbed: %+v", ev)
	default:
	}
}

func TestStopReleasesTheKeyForTheNextLeader(t *testing.T) {
	t.Parallel()
	// The bucket keeps the key's history, so the test reads what the next
	// leader claimed over; 10 s keeps that history from ageing out meanwhile.
	s, admin := serverWith(t, jetstream.KeyValueConfig{Bucket: "STOP", TTL: 10 * time.Second, History: 10})
	g := startGroup(t, "c", "k", handles(t, s.ClientURL(), "STOP", 3))

	first := g.awaitWin()
	g.elections[first.name].Stop()
	if g.elections[first.name].IsLeader() {
		t.Error("IsLeader true after Stop")
	}
	lost := g.awaitLoss(first.name)
	if !errors.Is(lost.cause, election.ErrStopped) {
		t.Errorf("stood down with cause %v, want ErrStopped", lost.cause)
	}
	second := g.awaitWin()
	if second.name == first.name {
		t.Errorf("%s led again after Stop", first.name)
	}

	// Released, not left to expire: the entry the next leader claimed over
	// is the stopped leader's release.
	history, err := admin.History(context.Background(), "k")
	if err != nil {
		t.Fatal(err)
	}
	var written []string
	for i, e := range history {
		written = append(written, fmt.Sprintf("%d %v %q", e.Revision(), e.Operation(), e.Value()))
		if e.Revision() != second.token {
			continue
		}
		if i == 0 || history[i-1].Operation() != jetstream.KeyValuePut || string(history[i-1].Value()) != "released:"+first.name {
			t.Errorf("%s claimed the key at revision %d over something other than %s's release; the key's history: %v",
				second.name, second.token, first.name, written)
		}
		return
	}
	t.Errorf("the key's history has no revision %d, %s's claim: %v", second.token, second.name, written)
}

// proxied opens n connections to the server, each through its own fault
// proxy, binds each to bucket, and returns the handles and the proxies of
// candidates c-0 … c-(n-1).
func proxied(t *testing.T, s *server.Server, bucket string, n int) ([]jetstream.KeyValue, map[string]*faultproxy.Proxy) {
	t.Helper()
	proxies := map[string]*faultproxy.Proxy{}
	var kvs []jetstream.KeyValue
	for i := range n {
		p, err := faultproxy.New(s.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(p.Close)
		proxies[fmt.Sprintf("c-%d", i)] = p
		kvs = append(kvs, handles(t, p.URL(), bucket, 1)...)
	}
	return kvs, proxies
}

// nextUpdate returns the next entry from a watcher.
func nextUpdate(t *testing.T, w jetstream.KeyWatcher) jetstream.KeyValueEntry {
	t.Helper()
	select {
	case e := <-w.Updates():
		return e
	case <-time.After(awaitTimeout):
		t.Fatalf("no update of the key within %v", awaitTimeout)
		return nil
	}
}

// awaitUpdate returns the first entry from a watcher that match accepts. It
// fails the test after awaitTimeout, naming what the watcher delivered
// meanwhile: a stream of other entries must not keep it waiting forever.
func awaitUpdate(t *testing.T, w jetstream.KeyWatcher, what string, match func(jetstream.KeyValueEntry) bool) jetstream.KeyValueEntry {
	t.Helper()
	timeout := time.After(awaitTimeout)
	var seen []string
	for {
		select {
		case e := <-w.Updates():
			if match(e) {
				return e
			}
			seen = append(seen, fmt.Sprintf("%d %v %q", e.Revision(), e.Operation(), e.Value()))
		case <-timeout:
			t.Fatalf("no %s within %v; the watcher delivered %v", what, awaitTimeout, seen)
			return nil
		}
	}
}

// awaitRenewal waits until the leader writes the key again.
func awaitRenewal(t *testing.T, w jetstream.KeyWatcher, leader string) jetstream.KeyValueEntry {
	t.Helper()
	return awaitUpdate(t, w, "write by "+leader, func(e jetstream.KeyValueEntry) bool { return string(e.Value()) == leader })
}

// cutOff is a running group whose leader's connection was just blackholed,
// right after a renewal, and a watcher on the key from outside.
type cutOff struct {
	*group
	admin   jetstream.KeyValue
	watch   jetstream.KeyWatcher
	leader  event
	renewal jetstream.KeyValueEntry // the leader's last renewal before the cut
	proxy   *faultproxy.Proxy       // the leader's
}

// cutOffLeader starts 3 candidates behind fault proxies, waits for a leader
// and one of its renewals, and blackholes its connection. The proxy is
// healed when the test ends.
func cutOffLeader(t *testing.T, bucket string) *cutOff {
	t.Helper()
	return cutOffLeaderIn(t, jetstream.KeyValueConfig{Bucket: bucket, TTL: ttl})
}

// cutOffLeaderIn is cutOffLeader with the bucket cfg describes.
func cutOffLeaderIn(t *testing.T, cfg jetstream.KeyValueConfig) *cutOff {
	t.Helper()
	s, admin := serverWith(t, cfg)
	kvs, proxies := proxied(t, s, cfg.Bucket, 3)
	g := startGroup(t, "c", "k", kvs)
	leader := g.awaitWin()
	w, err := admin.Watch(context.Background(), "k", jetstream.UpdatesOnly())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Stop() })
	renewal := awaitRenewal(t, w, leader.name) // the leader's validity runs longest from here
	p := proxies[leader.name]
	p.Blackhole()
	t.Cleanup(p.Heal)
	return &cutOff{group: g, admin: admin, watch: w, leader: leader, renewal: renewal, proxy: p}
}

// awaitStandDown waits for the cut-off leader to stand down by its deadline.
func (c *cutOff) awaitStandDown(t *testing.T) event {
	t.Helper()
	lost := c.awaitLoss(c.leader.name)
	if !errors.Is(lost.cause, election.ErrRenewDeadline) {
		t.Errorf("stood down with cause %v, want ErrRenewDeadline", lost.cause)
	}
	return lost
}

// awaitSuccessor waits for the next leader, which the group checks does not
// overlap the cut-off one, and checks it is another candidate.
func (c *cutOff) awaitSuccessor(t *testing.T, lost event) {
	t.Helper()
	next := c.awaitWin()
	if next.name == c.leader.name || !next.at.After(lost.at) {
		t.Errorf("%s announced at %v; the cut-off leader %s stood down at %v", next.name, next.at, c.leader.name, lost.at)
	}
}

func TestCutOffLeaderStandsDownBeforeItsKeyExpires(t *testing.T) {
	t.Parallel()
	c := cutOffLeader(t, "CUT")
	lost := c.awaitStandDown(t)
	// The leader's last write that reached the server is its latest on the watcher.
	last := c.renewal
drain:
	for {
		select {
		case e := <-c.watch.Updates():
			if string(e.Value()) == c.leader.name && e.Revision() > last.Revision() {
				last = e
			}
		default:
			break drain
		}
	}
	if expiry := last.Created().Add(ttl); !lost.at.Before(expiry) {
		t.Errorf("stood down at %v, not before its key could expire at %v", lost.at, expiry)
	}
	c.awaitSuccessor(t, lost)
}

// TestEarlyKeyRemovalNeverOverlapsACutOffLeader deletes the key of a leader
// that is cut off and cannot learn of it. Watching candidates win the key at
// once, while the old leader believes until its validity deadline: only the
// announce delay keeps the winner from overlapping it.
func TestEarlyKeyRemovalNeverOverlapsACutOffLeader(t *testing.T) {
	t.Parallel()
	c := cutOffLeader(t, "EARLY")
	if err := c.admin.Delete(context.Background(), "k"); err != nil {
		t.Fatal(err)
	}
	c.awaitSuccessor(t, c.awaitStandDown(t))
}

// TestExpiryMarkerOfAShortLivedOverwriteNeverOverlapsACutOffLeader cuts a
// leader off right after an acknowledged renewal, then overwrites its key
// with a value that lives one second (a per-message TTL, which a bucket
// with expiry markers allows). The value ages out well before the old
// leader's validity ends and leaves the same MaxAge marker an expired claim
// leaves: such a marker does not prove the holder's last write is a TTL old,
// so the winner over it must still wait out the announce delay.
func TestExpiryMarkerOfAShortLivedOverwriteNeverOverlapsACutOffLeader(t *testing.T) {
	t.Parallel()
	s, admin := serverWith(t, jetstream.KeyValueConfig{Bucket: "MARKER", TTL: ttl, LimitMarkerTTL: time.Second})
	kvs, proxies := proxied(t, s, "MARKER", 3)
	renewed := renewals{acked: make(chan string, 16)}
	g := startGroup(t, "c", "k", kvs, election.WithEventHook(renewed.Record))
	leader := g.awaitWin()
	w, err := admin.Watch(context.Background(), "k", jetstream.UpdatesOnly())
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	for len(renewed.acked) > 0 { // acknowledged before the announcement
		<-renewed.acked
	}
	for name := range renewed.acked { // the leader's validity now runs longest
		if name == leader.name {
			break
		}
	}
	p := proxies[leader.name]
	p.Blackhole()
	defer p.Heal()

	_, js := testenv.Connect(t, s.ClientURL())
	if _, err := js.Publish(context.Background(), "$KV.MARKER.k", []byte("rogue"), jetstream.WithMsgTTL(time.Second)); err != nil {
		t.Fatal(err)
	}
	// The marker, or the claim that replaced it before the server sent it to
	// this watcher: candidates claim only once the rogue value is gone.
	awaitUpdate(t, w, "expiry marker or a claim over it", func(e jetstream.KeyValueEntry) bool {
		v := string(e.Value())
		return e.Operation() == jetstream.KeyValuePurge || (v != "rogue" && v != leader.name)
	})
	lost := g.awaitLoss(leader.name)
	if !errors.Is(lost.cause, election.ErrRenewDeadline) {
		t.Errorf("stood down with cause %v, want ErrRenewDeadline", lost.cause)
	}
	if next := g.awaitWin(); !next.at.After(lost.at) {
		t.Errorf("%s announced at %v; the cut-off leader %s stood down at %v", next.name, next.at, leader.name, lost.at)
	}
}

// renewals is an event hook that reports who had a renewal acknowledged.
type renewals struct{ acked chan string }

func (r renewals) Record(ev election.Event) {
	if ev.Kind == election.EventRenewed && ev.Err == nil {
		select {
		case r.acked <- ev.Name:
		default:
		}
	}
}

// TestWinnerStoppedBeforeItAnnouncesDoesNotShortenTheDelay stops the
// candidate that won a cut-off leader's deleted key while it still waits out
// its announce delay. Its release must not let the next winner announce at
// once: the cut-off leader may still believe it leads.
func TestWinnerStoppedBeforeItAnnouncesDoesNotShortenTheDelay(t *testing.T) {
	t.Parallel()
	c := cutOffLeader(t, "STOPPED")
	if err := c.admin.Delete(context.Background(), "k"); err != nil {
		t.Fatal(err)
	}
	// The first candidate to claim the deleted key waits a TTL; stop it then.
	claim := awaitUpdate(t, c.watch, "claim by another candidate", func(e jetstream.KeyValueEntry) bool {
		return e.Operation() == jetstream.KeyValuePut && string(e.Value()) != c.leader.name
	})
	c.elections[string(claim.Value())].Stop()
	c.awaitSuccessor(t, c.awaitStandDown(t))
}
