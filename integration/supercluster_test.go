package integration

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/kvelect/election"
	"github.com/kvelect/election/internal/testenv"
	"github.com/nats-io/nats.go/jetstream"
)

// TestSupercluster runs elections on a bucket placed in region C1 of a
// supercluster of three regions, with candidates in all three, through one
// fault after another on the same supercluster, healed in between: a remote
// region cut off (silently, then loudly), the home region cut off, and
// delays on every gateway. The group checks throughout that no two
// candidates lead at once.
func TestSupercluster(t *testing.T) {
	t.Parallel()
	s := scale()
	sc := startSupercluster(t, []int{s.servers, s.servers, s.servers})
	for _, mode := range []cutMode{linkHeld, linkRefused} {
		t.Run("remote region isolated, "+mode.String(), func(t *testing.T) {
			remoteRegionIsolated(t, sc, mode)
		})
	}
	t.Run("home region isolated", func(t *testing.T) { homeRegionIsolated(t, sc) })
	for _, oneWay := range []time.Duration{0, 25 * time.Millisecond, 75 * time.Millisecond} {
		t.Run(fmt.Sprintf("gateway delay %v", oneWay), func(t *testing.T) { gatewayDelay(t, sc, oneWay) })
	}
}

// remoteRegionIsolated cuts off region C3 while its candidate leads: it
// must stand down within its validity, by its own clock, and a candidate
// of C1 or C2 must lead after it; once healed, C3's watchers resume.
func remoteRegionIsolated(t *testing.T, sc *supercluster, mode cutMode) {
	s := scale()
	bucket := "REMOTE_" + map[cutMode]string{linkHeld: "SILENT", linkRefused: "LOUD"}[mode]
	admin := sc.homeBucket(t, bucket, s.ttl)
	defer sc.settle(t, bucket)
	history := watchKey(t, admin, "k") // from the home region: every write that reached the bucket
	rec := newRenewRecord()
	g := startRegionGroup(t, sc, bucket, "k", rec, "C3", "C1", "C2")
	w3 := watchKey(t, sc.kv(t, "C3", bucket), "probe")
	probe3 := startProbe(sc.kv(t, "C3", bucket), "probe-C3", 250*time.Millisecond, 2*time.Second)
	defer probe3.stop()

	rec.await(t, "C3", time.Now())
	cut := time.Now()
	sc.IsolateRegion("C3", mode.fault())
	lost := g.awaitLoss("C3")
	next := g.awaitWin()
	if next.name == "C3" {
		t.Errorf("C3, cut off, led again")
	}
	checkStoodDownInTime(t, s.ttl, rec, history, "C3", cut, lost)
	holdCut(cut, s.minCut)
	heal := time.Now()
	sc.Heal()
	resume := watchResume(t, admin, w3, "probe")
	figure(t, "C3's leader stood down %v after the cut; a candidate of %s led %v later (leaderless)",
		lost.at.Sub(cut).Round(time.Millisecond), next.name, next.at.Sub(lost.at).Round(time.Millisecond))
	figure(t, "C3's writes to the C1 bucket during the cut: %s", runs(probe3.stop(), cut, heal))
	figure(t, "C3's watcher delivered a write made after the heal %v after it", resume.Round(time.Millisecond))
}

// checkStoodDownInTime checks that name, cut off at cut, stood down
// (lost) because its renewals failed, within its validity of its last
// acknowledged write, and before the key could age out on the server.
func checkStoodDownInTime(t *testing.T, ttl time.Duration, rec *renewRecord, history jetstream.KeyWatcher, name string, cut time.Time, lost event) {
	t.Helper()
	if !errors.Is(lost.cause, election.ErrRenewDeadline) {
		t.Errorf("%s stood down with cause %v, want ErrRenewDeadline", name, lost.cause)
	}
	last, ok := rec.last(name, cut)
	if !ok {
		t.Fatalf("no renewal by %s before the cut", name)
	}
	// The validity is counted on the leader's clock from when it sent its
	// last acknowledged write; OnLost runs once IsLeader has turned false,
	// after scheduling delay, well within the margin before the work
	// deadline.
	v := validity(ttl)
	if held := lost.at.Sub(last.sent); held > election.TimingFor(ttl, 0).WorkDeadline {
		t.Errorf("%s stood down %v after sending its last acknowledged renewal; its validity is %v", name, held, v)
	} else {
		figure(t, "%s stood down %v after sending its last acknowledged renewal (validity %v)", name, held.Round(time.Millisecond), v)
	}
	// The server's record of the leader's last write: the key could age
	// out no earlier than a TTL after it.
	var written time.Time
drain:
	for {
		select {
		case e, ok := <-history.Updates():
			if !ok {
				break drain
			}
			if e != nil && string(e.Value()) == name {
				written = e.Created()
			}
		default:
			break drain
		}
	}
	if written.IsZero() {
		t.Fatalf("the home region's watcher saw no write by %s", name)
	}
	if expiry := written.Add(ttl); !lost.at.Before(expiry) {
		t.Errorf("%s stood down at %v, not before its key could age out at %v", name, lost.at, expiry)
	}
}

// homeRegionIsolated cuts off C1, where the bucket lives, while C2's
// candidate leads: C2 stands down, and only C1's candidate can lead, which
// it does; C2 and C3 cannot, however long the cut. C1 keeps renewing, since
// the bucket's stream needs no other region, although C1 has no JetStream
// meta quorum: a new watcher there fails.
func homeRegionIsolated(t *testing.T, sc *supercluster) {
	s := scale()
	const bucket = "HOME"
	admin := sc.homeBucket(t, bucket, s.ttl)
	defer sc.settle(t, bucket)
	history := watchKey(t, admin, "k")
	rec := newRenewRecord()
	g := startRegionGroup(t, sc, bucket, "k", rec, "C2", "C1", "C3")
	w3 := watchKey(t, sc.kv(t, "C3", bucket), "probe")
	probe3 := startProbe(sc.kv(t, "C3", bucket), "probe-C3", 250*time.Millisecond, 2*time.Second)
	defer probe3.stop()
	fresh := sc.kv(t, "C1", bucket)

	rec.await(t, "C2", time.Now())
	cut := time.Now()
	sc.IsolateRegion("C1", linkHeld.fault())
	watchErr := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		w, err := fresh.Watch(ctx, "k", jetstream.UpdatesOnly())
		if err == nil {
			w.Stop()
		}
		watchErr <- err
	}()
	lost := g.awaitLoss("C2")
	next := g.awaitWin()
	if next.name != "C1" {
		t.Errorf("%s led with the home region C1 cut off; only C1 can reach the bucket", next.name)
	}
	checkStoodDownInTime(t, s.ttl, rec, history, "C2", cut, lost)
	// C1 keeps leading: it renews through the cut.
	rec.await(t, "C1", next.at)
	if err := <-watchErr; err == nil {
		t.Errorf("a new watcher in C1 started with C1 cut off from the meta group's majority")
	} else {
		figure(t, "a new watcher in C1, cut off: %s (%v)", errClass(err), err)
	}
	holdCut(cut, s.minCut)
	for _, ev := range g.drain() {
		if ev.won && ev.name != "C1" {
			t.Errorf("%s led while C1 was cut off", ev.name)
		}
		if !ev.won && ev.name == "C1" {
			t.Errorf("C1 stood down while cut off, with its bucket: %v", ev.cause)
		}
	}
	heal := time.Now()
	sc.Heal()
	resume := watchResume(t, admin, w3, "probe")
	figure(t, "C2's leader stood down %v after the cut; C1's candidate led %v later (leaderless)",
		lost.at.Sub(cut).Round(time.Millisecond), next.at.Sub(lost.at).Round(time.Millisecond))
	figure(t, "C3's writes to the C1 bucket during the cut: %s", runs(probe3.stop(), cut, heal))
	figure(t, "C3's watcher delivered a write made after the heal %v after it", resume.Round(time.Millisecond))
}

// gatewayDelay adds oneWay to every gateway crossing and measures, from
// each region, a renewal's round trip to the C1 bucket and how long a
// write takes to reach a watcher. With a delay, a candidate of C3 leads
// and must renew without losing leadership; the TTL keeps the time a
// leader has to retry a renewal (from the interval to the validity
// deadline) at least 4 round trips, in whole seconds.
func gatewayDelay(t *testing.T, sc *supercluster, oneWay time.Duration) {
	s := scale()
	ttl := s.ttl
	for rtt := 2 * oneWay; ; ttl += time.Second {
		if tm := election.TimingFor(ttl, 0); tm.Validity-tm.Interval >= 4*rtt {
			break
		}
	}
	bucket := fmt.Sprintf("DELAY%d", oneWay.Milliseconds())
	admin := sc.homeBucket(t, bucket, ttl)
	defer sc.settle(t, bucket)
	sc.setDelay(oneWay)
	start := time.Now()
	var g *group
	rec := newRenewRecord()
	if oneWay > 0 {
		g = startRegionGroup(t, sc, bucket, "k", rec, "C3", "C1", "C2")
	}
	kvs := map[string]jetstream.KeyValue{}
	for _, region := range sc.Regions() {
		kvs[region] = sc.kv(t, region, bucket)
	}
	rtts := renewRTTs(t, kvs, s.samples)
	lat := watchLatencies(t, admin, map[string]jetstream.KeyValue{"C2": kvs["C2"], "C3": kvs["C3"]}, "w", s.samples)
	for _, region := range sc.Regions() {
		p50, p99 := percentiles(rtts[region])
		figure(t, "renewal round trip from %s: p50 %s, p99 %s (n=%d)", region, ms(p50), ms(p99), len(rtts[region]))
		switch {
		case region == "C1" && oneWay > 0 && p50 >= oneWay: // without a delay nothing tells a gateway apart, and a busy machine takes milliseconds
			t.Errorf("renewals from the home region took %v (p50): they should not cross a gateway", p50)
		case region != "C1" && p50 < 2*oneWay:
			t.Errorf("renewals from %s took %v (p50), under the %v round trip the gateway delay adds: the proxies were bypassed", region, p50, 2*oneWay)
		}
	}
	for _, region := range []string{"C2", "C3"} {
		p50, p99 := percentiles(lat[region])
		figure(t, "watch event from a C1 write to %s: p50 %s, p99 %s (n=%d of %d writes; a value replaced before it was sent is skipped)", region, ms(p50), ms(p99), len(lat[region]), s.samples)
		if p50 < oneWay {
			t.Errorf("watch events reached %s in %v (p50), under the %v one-way gateway delay", region, p50, oneWay)
		}
	}
	if g == nil {
		return
	}
	// A renewal by C3 after the measurements, and none lost.
	rec.await(t, "C3", start)
	for _, ev := range g.drain() {
		t.Errorf("leadership changed with %v one-way on the gateways at TTL %v: %+v", oneWay, ttl, ev)
	}
	p50, p99 := percentiles(rec.rtts("C3"))
	figure(t, "C3's leader at TTL %v never lost leadership in %v (renewals: %d); round trip p50 %s, p99 %s",
		ttl, time.Since(start).Round(time.Second), len(rec.rtts("C3")), ms(p50), ms(p99))
}

// TestSuperclusterHomeStreamLeaderKilled SIGKILLs the server that leads
// the bucket's stream in C1 (an R3 bucket on C1's three servers) while a
// candidate of C2 leads: nothing can be written until C1's other servers
// elect a new stream leader. The leader keeps leading only if that takes
// less than what is left of its validity; otherwise it stands down, and a
// candidate leads once the stream is back.
func TestSuperclusterHomeStreamLeaderKilled(t *testing.T) {
	t.Parallel()
	s := scale()
	const victim = "C1-S1"
	sc := startSupercluster(t, []int{3, s.servers, s.servers}, victim)
	const bucket = "KILL"
	sc.homeBucket(t, bucket, s.ttl)
	nc, js := sc.connect(t, "C1")
	// Move the stream's leadership to the server that can be killed.
	testenv.Poll(t, victim+" leading the bucket's stream", awaitTimeout, func() (string, bool) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		stream, err := js.Stream(ctx, "KV_"+bucket)
		if err != nil {
			return err.Error(), false
		}
		info, err := stream.Info(ctx)
		if err != nil || info.Cluster == nil {
			return fmt.Sprint(err), false
		}
		if leader := info.Cluster.Leader; leader != victim {
			nc.RequestWithContext(ctx, "$JS.API.STREAM.LEADER.STEPDOWN.KV_"+bucket, fmt.Appendf(nil, `{"placement":{"preferred":%q}}`, victim))
			return leader, false
		}
		return victim, true
	})
	rec := newRenewRecord()
	g := startRegionGroup(t, sc, bucket, "k", rec, "C2", "C1", "C3")
	probe1 := startProbe(sc.kv(t, "C1", bucket), "probe-C1", 50*time.Millisecond, time.Second)
	defer probe1.stop()

	rec.await(t, "C2", time.Now())
	kill := time.Now()
	sc.procs[victim].Kill()
	back := testenv.Poll(t, "a write to the bucket after its stream leader was killed", awaitTimeout, func() (probeResult, bool) {
		return probe1.first("ok", kill)
	})
	failover := back.at.Add(back.took).Sub(kill)
	// Once the stream is back, C2 either renews or has stood down.
	var evs []event
	testenv.Poll(t, "C2 to renew or stand down once the stream was back", awaitTimeout, func() (int, bool) {
		evs = append(evs, g.drain()...)
		_, renewed := rec.since("C2", back.at)
		return len(evs), renewed || slices.ContainsFunc(evs, func(e event) bool { return !e.won && e.name == "C2" })
	})
	outcome := "the leader kept leading"
	for i, ev := range evs {
		if ev.won || ev.name != "C2" {
			continue
		}
		figure(t, "C2's leader stood down %v after the kill (validity %v): %v", ev.at.Sub(kill).Round(time.Millisecond), validity(s.ttl), ev.cause)
		next, found := event{}, false
		if j := slices.IndexFunc(evs[i+1:], func(e event) bool { return e.won }); j >= 0 {
			next, found = evs[i+1+j], true
		}
		if !found {
			next = g.awaitWin()
		}
		outcome = fmt.Sprintf("the leader stood down and %s led %v later (leaderless)", next.name, next.at.Sub(ev.at).Round(time.Millisecond))
		break
	}
	figure(t, "C1's stream took writes again %v after its leader was killed; %s", failover.Round(time.Millisecond), outcome)
	figure(t, "C1's writes from the kill on: %s", runs(probe1.stop(), kill, time.Now()))
}

// TestSuperclusterTwoRegionSplit splits a supercluster of two regions:
// neither half holds a majority of the JetStream meta group, so no region
// can create a bucket or start a watcher, not even the one with the bucket.
// The bucket's own region keeps writing to it, so its leader keeps leading;
// the other region's candidate cannot lead. Three regions are the minimum.
func TestSuperclusterTwoRegionSplit(t *testing.T) {
	t.Parallel()
	s := scale()
	sc := startSupercluster(t, []int{s.servers, s.servers})
	const bucket = "SPLIT"
	admin := sc.homeBucket(t, bucket, s.ttl)
	rec := newRenewRecord()
	g := startRegionGroup(t, sc, bucket, "k", rec, "C1", "C2")
	kv2 := sc.kv(t, "C2", bucket)
	w2 := watchKey(t, kv2, "probe")
	_, js1 := sc.connect(t, "C1")
	_, js2 := sc.connect(t, "C2")

	rec.await(t, "C1", time.Now())
	cut := time.Now()
	sc.IsolateRegion("C2", linkHeld.fault())
	type attempt struct {
		what string
		err  error
	}
	attempts := make(chan attempt, 3)
	try := func(what string, f func(ctx context.Context) error) {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		attempts <- attempt{what, f(ctx)}
	}
	go try("a new bucket in C1", func(ctx context.Context) error {
		_, err := js1.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "NEW_C1", TTL: s.ttl})
		return err
	})
	go try("a new bucket in C2", func(ctx context.Context) error {
		_, err := js2.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "NEW_C2", TTL: s.ttl})
		return err
	})
	go try("a new watcher in C1", func(ctx context.Context) error {
		w, err := admin.Watch(ctx, "k", jetstream.UpdatesOnly())
		if err == nil {
			w.Stop()
		}
		return err
	})
	for range 3 {
		a := <-attempts
		if a.err == nil {
			t.Errorf("%s succeeded during the split: neither region has a meta majority", a.what)
		} else {
			figure(t, "%s during the split: %s (%v)", a.what, errClass(a.err), a.err)
		}
	}
	// C1's leader keeps renewing.
	rec.await(t, "C1", time.Now())
	holdCut(cut, s.minCut)
	for _, ev := range g.drain() {
		t.Errorf("leadership changed during the split: %+v", ev)
	}
	heal := time.Now()
	sc.Heal()
	resume := watchResume(t, admin, w2, "probe")
	figure(t, "C2's watcher delivered a write made after the heal %v after it", resume.Round(time.Millisecond))
	var wg sync.WaitGroup
	for region, js := range map[string]jetstream.JetStream{"C1": js1, "C2": js2} {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), awaitTimeout)
			defer cancel()
			for {
				actx, acancel := context.WithTimeout(ctx, 2*time.Second)
				_, err := js.CreateKeyValue(actx, jetstream.KeyValueConfig{Bucket: "AFTER_" + region, TTL: s.ttl})
				acancel()
				if err == nil {
					figure(t, "a new bucket in %s succeeded %v after the heal", region, time.Since(heal).Round(time.Millisecond))
					return
				}
				if ctx.Err() != nil {
					t.Errorf("no new bucket in %s within %v of the heal: %v", region, awaitTimeout, err)
					return
				}
			}
		})
	}
	wg.Wait()
}
