package integration

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/kvelect/election/internal/testenv"
	"github.com/nats-io/nats.go/jetstream"
)

// TestMirrorNextToCandidatesNeverDecides puts a mirror of the election
// bucket (in C1) in region C2, next to a candidate there. The origin lists
// the mirror as a direct-get alternate, so C2's Gets of the origin bucket
// are answered by the mirror: stale right after a write, and stale for as
// long as C2 is cut off. The election decides only by compare-and-set and
// its watcher, which the mirror never answers: with C2's candidate leading
// and C2 cut off, it stands down in time and another region's candidate
// leads, never two at once, while a Get in C2 still names the old leader
// or none.
func TestMirrorNextToCandidatesNeverDecides(t *testing.T) {
	t.Parallel()
	s := scale()
	sc := startSupercluster(t, []int{s.servers, s.servers, s.servers})
	const bucket = "EL"
	admin := sc.homeBucket(t, bucket, s.ttl)
	_, js := sc.connect(t, "C1")
	ctx := context.Background()
	testenv.Bucket(t, js, jetstream.KeyValueConfig{
		Bucket: "ELM", TTL: s.ttl, Replicas: s.servers,
		Mirror:    &jetstream.StreamSource{Name: bucket},
		Placement: &jetstream.Placement{Cluster: "C2"},
	})
	const oneWay = 25 * time.Millisecond
	sc.setDelay(oneWay)
	defer sc.Heal()

	// C2's Gets of the origin right after a write in C1: the mirror answers
	// them, before the write has reached it. C3 has no mirror.
	get := map[string]jetstream.KeyValue{"C2": sc.kv(t, "C2", bucket), "C3": sc.kv(t, "C3", bucket)}
	stale := map[string]int{}
	took := map[string][]time.Duration{}
	for i := range s.samples {
		want := fmt.Sprint(i)
		if _, err := admin.Put(ctx, "stale", []byte(want)); err != nil {
			t.Fatal(err)
		}
		for _, region := range []string{"C2", "C3"} {
			start := time.Now()
			e, err := get[region].Get(ctx, "stale")
			took[region] = append(took[region], time.Since(start))
			if err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
				t.Fatalf("Get in %s: %v", region, err)
			}
			if err != nil || string(e.Value()) != want {
				stale[region]++
			}
		}
	}
	for _, region := range []string{"C2", "C3"} {
		p50, p99 := percentiles(took[region])
		figure(t, "Get of the C1 bucket from %s right after a write in C1: %d of %d stale; p50 %s, p99 %s", region, stale[region], s.samples, ms(p50), ms(p99))
	}
	if stale["C2"] == 0 {
		t.Fatalf("no Get in C2 was stale: the mirror did not answer them, and this test shows nothing")
	}

	rec := newRenewRecord()
	history := watchKey(t, admin, "k")
	g := startRegionGroup(t, sc, bucket, "k", rec, "C2", "C1", "C3")
	rec.await(t, "C2", time.Now())
	cut := time.Now()
	sc.IsolateRegion("C2", linkHeld.fault())
	lost := g.awaitLoss("C2")
	next := g.awaitWin()
	if next.name == "C2" {
		t.Errorf("C2, cut off, led again")
	}
	checkStoodDownInTime(t, s.ttl, rec, history, "C2", cut, lost)
	// What a decision from a Get in C2 would have seen, now that another
	// region's candidate leads: the mirror's copy, never that candidate.
	gctx, cancel := context.WithTimeout(ctx, time.Second)
	e, err := get["C2"].Get(gctx, "k")
	cancel()
	var seen string
	switch {
	case err == nil:
		seen = fmt.Sprintf("%q", e.Value())
	case errors.Is(err, jetstream.ErrKeyNotFound):
		seen = "no key"
	default:
		t.Fatalf("Get in C2, cut off, was not answered by the mirror: %v", err)
	}
	if err == nil && string(e.Value()) == next.name {
		t.Errorf("Get in C2, cut off, named the new leader %s: the mirror cannot know it", next.name)
	}
	figure(t, "with C2 cut off and %s leading, a Get in C2 answered %s at once, from the mirror", next.name, seen)
	holdCut(cut, s.minCut)
	heal := time.Now()
	sc.Heal()
	// nats-server retries a mirror's failed consumer after 10 s per failure
	// so far, at most 2 minutes apart (stream.go, calculateRetryBackoff): a
	// long cut can keep a mirror behind for minutes after the heal.
	caught := testenv.Poll(t, "C2's mirror to show the leader", 3*time.Minute, func() (string, bool) {
		ctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		e, err := get["C2"].Get(ctx, "k")
		if err != nil {
			return err.Error(), false
		}
		leaders := g.leaders()
		return string(e.Value()), len(leaders) == 1 && string(e.Value()) == leaders[0]
	})
	figure(t, "C2's leader stood down %v after the cut; %s led %v later (leaderless)",
		lost.at.Sub(cut).Round(time.Millisecond), next.name, next.at.Sub(lost.at).Round(time.Millisecond))
	figure(t, "a Get in C2 showed the leader %s %v after the heal", caught, time.Since(heal).Round(time.Millisecond))
}
