package integration

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/kvelect/election"
	"github.com/kvelect/election/internal/testenv"
	"github.com/nats-io/nats.go/jetstream"
)

// TestARemovalTheLeaderSawFailsOverOverItsVouch removes a reachable leader's
// key in each way another client can: the leader sees it, stands down and
// vouches by writing its release over the removal, and the next leader
// claims over that release (so it announces at once, not a TTL later).
func TestARemovalTheLeaderSawFailsOverOverItsVouch(t *testing.T) {
	t.Parallel()
	removals := []struct {
		name   string
		remove func(kv jetstream.KeyValue) error
		isIt   func(e jetstream.KeyValueEntry) bool
	}{
		{"delete", func(kv jetstream.KeyValue) error { return kv.Delete(context.Background(), "k") },
			func(e jetstream.KeyValueEntry) bool { return e.Operation() == jetstream.KeyValueDelete }},
		{"purge", func(kv jetstream.KeyValue) error { return kv.Purge(context.Background(), "k") },
			func(e jetstream.KeyValueEntry) bool { return e.Operation() == jetstream.KeyValuePurge }},
		{"overwrite", func(kv jetstream.KeyValue) error {
			_, err := kv.Put(context.Background(), "k", []byte("rogue"))
			return err
		}, func(e jetstream.KeyValueEntry) bool { return string(e.Value()) == "rogue" }},
	}
	for _, r := range removals {
		t.Run(r.name, func(t *testing.T) {
			t.Parallel()
			bucket := "VOUCH_" + r.name
			// The bucket keeps the key's history, so the test reads what the
			// next leader claimed over.
			s, admin := serverWith(t, jetstream.KeyValueConfig{Bucket: bucket, TTL: 10 * time.Second, History: 10})
			g := startGroup(t, "c", "k", handles(t, s.ClientURL(), bucket, 3))
			leader := g.awaitWin()
			if err := r.remove(admin); err != nil {
				t.Fatal(err)
			}
			lost := g.awaitLoss(leader.name)
			if !errors.Is(lost.cause, election.ErrRevisionGone) {
				t.Errorf("%s stood down with cause %v, want ErrRevisionGone", leader.name, lost.cause)
			}
			next := g.awaitWin()
			if next.name == leader.name {
				t.Errorf("%s led again right after it vouched; it sits out half a TTL", leader.name)
			}
			revs := keyHistory(t, admin, "k")
			i := revs.index(next.token)
			if i < 2 || !revs.isRelease(i-1, leader.name) || !r.isIt(revs[i-2]) {
				t.Errorf("%s claimed at revision %d over something other than %s's vouch over the %s; the key's history: %v",
					next.name, next.token, leader.name, r.name, revs)
			}
		})
	}
}

// TestAClaimWaitingOutARemovalDoesNotVouch deletes the key of a cut-off
// leader, then deletes the claim of the candidate that won it while that
// candidate still waits out its announce delay. The cut-off leader cannot
// vouch, and the candidate must not: the cut-off leader may still believe
// it leads, so the next winner must wait a TTL too.
func TestAClaimWaitingOutARemovalDoesNotVouch(t *testing.T) {
	t.Parallel()
	c := cutOffLeaderIn(t, jetstream.KeyValueConfig{Bucket: "WAITING", TTL: ttl, History: 10})
	if err := c.admin.Delete(context.Background(), "k"); err != nil {
		t.Fatal(err)
	}
	claim := awaitUpdate(t, c.watch, "claim by another candidate", func(e jetstream.KeyValueEntry) bool {
		return e.Operation() == jetstream.KeyValuePut && string(e.Value()) != c.leader.name
	})
	claimant := string(claim.Value())
	if err := c.admin.Delete(context.Background(), "k"); err != nil {
		t.Fatal(err)
	}
	c.awaitSuccessor(t, c.awaitStandDown(t))
	for _, e := range keyHistory(t, c.admin, "k") {
		if string(e.Value()) == "released:"+claimant {
			t.Errorf("%s, which never announced, vouched at revision %d", claimant, e.Revision())
		}
	}
}

// TestAVouchOverAClaimWaitingToAnnounceStopsItsAnnouncement covers what a
// winner over a vouch rests on besides the voucher itself: a claim made over
// a removal before the vouch, still waiting out its announce delay, must
// never lead. Here a candidate claims over a deleted key, renews once, and
// is cut off; a release then written over its renewal (as a leader whose
// watcher skipped the delete and the claim would vouch) lets another
// candidate lead at once. The cut-off claimant still has a validity running
// past its announce time, so only the renewal it must have acknowledged
// after that time keeps it from announcing too.
func TestAVouchOverAClaimWaitingToAnnounceStopsItsAnnouncement(t *testing.T) {
	t.Parallel()
	const bucketTTL = 4 * time.Second
	s, admin := serverWith(t, jetstream.KeyValueConfig{Bucket: "CONFIRM", TTL: bucketTTL})
	// A holder that never renews; its key is deleted once the candidates run.
	if _, err := admin.Put(context.Background(), "k", []byte("gone")); err != nil {
		t.Fatal(err)
	}
	w, err := admin.Watch(context.Background(), "k", jetstream.UpdatesOnly())
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	kvs, proxies := proxied(t, s, "CONFIRM", 3)
	renewed := renewalLog{results: make(chan renewal, 1024)}
	g := startGroup(t, "c", "k", kvs, election.WithEventHook(renewed.Record))
	if err := admin.Delete(context.Background(), "k"); err != nil {
		t.Fatal(err)
	}
	claim := awaitUpdate(t, w, "claim over the delete", func(e jetstream.KeyValueEntry) bool {
		return e.Operation() == jetstream.KeyValuePut
	})
	claimant := string(claim.Value())
	renewed.await(t, claimant, true)
	proxies[claimant].Blackhole()
	defer proxies[claimant].Heal()
	latest, err := admin.Get(context.Background(), "k")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Update(context.Background(), "k", []byte("released:voucher"), latest.Revision()); err != nil {
		t.Fatal(err)
	}
	if next := g.awaitWin(); next.name == claimant {
		t.Fatalf("the cut-off claimant %s announced", claimant)
	}
	// The claimant's first renewal after the cut comes after its announce
	// time: by then it has announced, which the group reports as an
	// overlap, or it never will.
	renewed.await(t, claimant, false)
}

// renewalLog is an event hook that reports each renewal's outcome.
type renewalLog struct{ results chan renewal }

type renewal struct {
	name string
	ok   bool
}

func (r renewalLog) Record(ev election.Event) {
	if ev.Kind == election.EventRenewed {
		r.results <- renewal{ev.Name, ev.Err == nil}
	}
}

// await waits for a renewal by name that succeeded (ok) or failed.
func (r renewalLog) await(t *testing.T, name string, ok bool) {
	t.Helper()
	timeout := time.After(awaitTimeout)
	for {
		select {
		case got := <-r.results:
			if got.name == name && got.ok == ok {
				return
			}
		case <-timeout:
			t.Fatalf("no renewal by %s with ok=%v within %v", name, ok, awaitTimeout)
		}
	}
}

// revisions is a key's history as the bucket keeps it.
type revisions []jetstream.KeyValueEntry

func keyHistory(t *testing.T, kv jetstream.KeyValue, key string) revisions {
	t.Helper()
	h, err := kv.History(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// index returns the position of revision, or -1.
func (h revisions) index(revision uint64) int {
	for i, e := range h {
		if e.Revision() == revision {
			return i
		}
	}
	return -1
}

// isRelease reports whether the entry at i is name's release.
func (h revisions) isRelease(i int, name string) bool {
	return h[i].Operation() == jetstream.KeyValuePut && string(h[i].Value()) == "released:"+name
}

func (h revisions) String() string {
	s := ""
	for _, e := range h {
		s += fmt.Sprintf("[%d %v %q]", e.Revision(), e.Operation(), e.Value())
	}
	return s
}

// slowKV is a real bucket whose writes take a round trip of rtt, as from a
// region far from the bucket's: each reaches the server half of it after it
// was sent, and its acknowledgement comes back half of it later.
type slowKV struct {
	jetstream.KeyValue
	rtt time.Duration
}

func (s slowKV) Put(ctx context.Context, key string, value []byte) (uint64, error) {
	time.Sleep(s.rtt / 2)
	rev, err := s.KeyValue.Put(ctx, key, value)
	time.Sleep(s.rtt / 2)
	return rev, err
}

func (s slowKV) Update(ctx context.Context, key string, value []byte, last uint64) (uint64, error) {
	time.Sleep(s.rtt / 2)
	rev, err := s.KeyValue.Update(ctx, key, value, last)
	time.Sleep(s.rtt / 2)
	return rev, err
}

// TestTheVouchWindowFollowsASlowLeadersRoundTrip removes the key of a
// leader 400 ms away from the server (a round trip of 800 ms, within the
// renewal window of 1.5 s at a TTL of 12 s): its vouch lands 400 ms after it
// saw the removal, later than the vouch window's floor (250 ms). The other
// candidate waits for the vouch, having learnt the leader's round trip from
// its candidate record, and wins over it, announcing at once, instead of
// claiming over the removal first and waiting out a TTL.
func TestTheVouchWindowFollowsASlowLeadersRoundTrip(t *testing.T) {
	t.Parallel()
	const rtt = 800 * time.Millisecond
	s, admin := serverWith(t, jetstream.KeyValueConfig{Bucket: "VOUCH_SLOW", TTL: 12 * time.Second})
	kvs := handles(t, s.ClientURL(), "VOUCH_SLOW", 2)
	g := newGroup(t, "k")
	g.add("far", slowKV{KeyValue: kvs[0], rtt: rtt})
	if leader := g.awaitWin(); leader.name != "far" {
		t.Fatalf("%s won, want far", leader.name)
	}
	won := make(chan election.Event, 4)
	g.add("near", kvs[1], election.WithEventHook(func(ev election.Event) {
		if ev.Kind == election.EventWon {
			won <- ev
		}
	}))

	b, err := election.OpenBucket(context.Background(), admin)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	testenv.Poll(t, "far's record to show its round trip, and near's record", awaitTimeout, func() ([]election.Candidate, bool) {
		cands, err := b.Candidates(context.Background(), "k")
		if err != nil {
			t.Fatal(err)
		}
		return cands, slices.ContainsFunc(cands, func(c election.Candidate) bool { return c.Name == "far" && c.RoundTrip >= rtt }) &&
			slices.ContainsFunc(cands, func(c election.Candidate) bool { return c.Name == "near" })
	})

	removed := time.Now()
	if err := admin.Delete(context.Background(), "k"); err != nil {
		t.Fatal(err)
	}
	next := g.awaitWin()
	took := time.Since(removed)
	if next.name != "near" {
		t.Fatalf("%s won after the removal, want near", next.name)
	}
	if ev := <-won; ev.After != "released by far" {
		t.Errorf("near won over %q, want over far's vouch (\"released by far\"): its claim pre-empted the vouch", ev.After)
	}
	if took > 6*time.Second {
		t.Errorf("near led %v after the removal, want well within the TTL (12s): over the vouch it announces at once", took)
	}
	t.Logf("near led %v after the removal of slow far's key", took)
}
