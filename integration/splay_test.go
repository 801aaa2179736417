package integration

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kvelect/election"
	"github.com/kvelect/election/internal/testenv"
	"github.com/nats-io/nats.go/jetstream"
)

// splayTTL makes the start delay, if any, up to 5 s: long against what the
// tests below allow.
const splayTTL = 10 * time.Second

// startSplayed starts a candidate named name on kv with the start delay on
// (no WithoutSplay) and returns it with a channel closed when it leads.
func startSplayed(t *testing.T, kv jetstream.KeyValue, name string) (*election.Election, <-chan struct{}) {
	t.Helper()
	won := make(chan struct{})
	var first sync.Once
	e, err := election.NewElection(context.Background(), name, "k", kv,
		election.WithLogger(testenv.Logger(t).With("candidate", name)), election.OnWon(func() { first.Do(func() { close(won) }) }))
	if err != nil {
		t.Fatal(err)
	}
	run(t, e)
	return e, won
}

// run starts e's campaign and returns a func that stops it and waits until
// Start has returned: idempotent, and called at the test's cleanup too.
func run(t *testing.T, e *election.Election) (stop func()) {
	done := make(chan struct{})
	go func() { defer close(done); e.Start(context.Background()) }()
	var once sync.Once
	stop = func() { once.Do(func() { e.Stop(); <-done }) }
	t.Cleanup(stop)
	return stop
}

// TestALoneCandidateOfAFreeKeyLeadsAtOnce: with nobody else listed for a
// free key, a candidate does not wait out a start delay.
func TestALoneCandidateOfAFreeKeyLeadsAtOnce(t *testing.T) {
	t.Parallel()
	s, _ := serverWith(t, jetstream.KeyValueConfig{Bucket: "LONE", TTL: splayTTL})
	kvs := handles(t, s.ClientURL(), "LONE", 1)
	started := time.Now()
	_, won := startSplayed(t, kvs[0], "lone")
	select {
	case <-won:
		if took := time.Since(started); took > time.Second {
			t.Errorf("the lone candidate led %v after it started, want well under a second", took)
		}
	case <-time.After(awaitTimeout):
		t.Fatal("the lone candidate never led")
	}
}

// TestATransferReachesACandidateJustStarted: a candidate that joins a held
// key campaigns at once, so a transfer to it as soon as it is listed
// succeeds instead of finding it still waiting out a start delay.
func TestATransferReachesACandidateJustStarted(t *testing.T) {
	t.Parallel()
	s, admin := serverWith(t, jetstream.KeyValueConfig{Bucket: "JOINER", TTL: splayTTL})
	kvs := handles(t, s.ClientURL(), "JOINER", 2)
	_, leaderWon := startSplayed(t, kvs[0], "leader")
	select {
	case <-leaderWon:
	case <-time.After(awaitTimeout):
		t.Fatal("no leader")
	}
	b := openBucket(t, admin)
	startSplayed(t, kvs[1], "joiner")
	testenv.Eventually(t, "the joiner to be listed", awaitTimeout, func() bool {
		candidates, err := b.Candidates(context.Background(), "k")
		return err == nil && len(candidates) == 2
	})
	ctx, cancel := context.WithTimeout(context.Background(), awaitTimeout)
	defer cancel()
	if now, err := b.Transfer(ctx, "k", "joiner"); err != nil || now.Name != "joiner" {
		t.Errorf("transfer to a candidate just started: %v leads, %v; want joiner, nil", now.Name, err)
	}
}

// The tests below hold the guarantee of options.go WithoutSplay,
// docs/library.md and docs/operations.md: a candidate's start delay ends
// once another candidate writes the key (a claim, a release), and a
// delete, a purge or an expiry marker, which no candidate writes, does not
// end it. The delay is drawn uniformly below TTL/2, up to 5 s at splayTTL;
// where a test needs a draw of a given kind it loops over fresh keys, each
// a new draw, and fails only after so many rounds that no suitable draw
// among them is vanishingly unlikely (each test says how unlikely).

// TestACandidateInItsStartDelayTakesAReleaseAtOnce starts b beside a listed
// candidate that claims nothing (startSick), so that b draws a start delay
// for the free key; a round counts once the delay is 2 s or more. Then a,
// without a delay, claims the key and stops at once, releasing it: b leads
// within a second of the release, not once its own delay has passed. (A
// crowd started together, whose first winner's health check fails or which
// is stopped at once, is in that spot.) A draw is under 2 s with
// probability 0.4, so 15 rounds all under it come with probability
// 0.4^15 ≈ 1e-6.
func TestACandidateInItsStartDelayTakesAReleaseAtOnce(t *testing.T) {
	t.Parallel()
	s, admin := serverWith(t, jetstream.KeyValueConfig{Bucket: "SPLAYREL", TTL: splayTTL})
	kvs := handles(t, s.ClientURL(), "SPLAYREL", 3)
	bucket := openBucket(t, admin)
	for round := 0; ; round++ {
		if round == 15 {
			t.Fatal("15 rounds drew no start delay of 2 s or more")
		}
		key := fmt.Sprintf("k%d", round)
		stopSick := startSick(t, kvs[0], bucket, key)
		delays := make(chan drawnDelay, 1)
		bWon := make(chan time.Time, 1)
		b, err := election.NewElection(context.Background(), "b", key, kvs[1],
			election.WithLogger(slog.New(&startDelayLog{name: "b", delays: delays})),
			election.OnWon(func() { bWon <- time.Now() }))
		if err != nil {
			t.Fatal(err)
		}
		stopB := run(t, b)
		var delay time.Duration
		select {
		case drawn := <-delays:
			delay = drawn.delay
		case <-time.After(awaitTimeout):
			t.Fatal("b drew no start delay beside a listed candidate of a free key")
		}
		if delay < 2*time.Second {
			stopB()
			stopSick()
			continue
		}

		aWon := make(chan struct{})
		a, err := election.NewElection(context.Background(), "a", key, kvs[2], election.WithoutSplay(),
			election.OnWon(func() { close(aWon) }))
		if err != nil {
			t.Fatal(err)
		}
		stopA := run(t, a)
		select {
		case <-aWon:
		case won := <-bWon:
			t.Fatalf("b led at %v, within its start delay of %v, before a claimed the free key", won, delay)
		case <-time.After(awaitTimeout):
			t.Fatal("a never led")
		}
		released := time.Now()
		stopA()
		select {
		case won := <-bWon:
			took := won.Sub(released)
			if took > time.Second {
				t.Errorf("b led %v after a released the key, want within a second (its start delay was %v)", took, delay)
			}
			t.Logf("round %d: b led %v after a released the key; its start delay was %v", round, took, delay.Round(time.Millisecond))
		case <-time.After(awaitTimeout):
			t.Error("b never led after a released the key")
		}
		stopB()
		stopSick()
		return
	}
}

// TestACrowdInItsStartDelaysDoesNotClaimTogetherOnAKeyDelete: ten
// candidates started together beside a listed one that never claims each
// draw a start delay (up to 5 s at TTL 10 s) for the free key. An operator
// deletes the key while they wait: no candidate wrote it, and the key is as
// free as before, so the delays go on and the crowd's first claims stay
// spread over them. Counted: the claims sent within 100 ms of the first
// claim after the delete; asserted: no more than the delays that end by
// then, plus one.
//
// A round counts only if no claim came before the delete, that is, no
// delay ended in the moments between its draw and the delete; otherwise
// the test goes on with a fresh key and crowd. That gap is tens of
// milliseconds, so a round is lost with probability well under 0.5 (any
// of ten delays under 250 ms: at most 10 × 0.05); 20 rounds all lost come
// with probability under 0.5^20 ≈ 1e-6.
func TestACrowdInItsStartDelaysDoesNotClaimTogetherOnAKeyDelete(t *testing.T) {
	t.Parallel()
	const crowd = 10
	s, admin := serverWith(t, jetstream.KeyValueConfig{Bucket: "HERDDEL", TTL: splayTTL})
	kvs := handles(t, s.ClientURL(), "HERDDEL", crowd+1)
	b := openBucket(t, admin)
	ctx := context.Background()
	for round := 0; ; round++ {
		if round == 20 {
			t.Fatal("in 20 rounds, a claim always came before the delete: a start delay ended before it each time")
		}
		key := fmt.Sprintf("k%d", round)
		if err := admin.Delete(ctx, key); err != nil { // the key free, with an entry
			t.Fatal(err)
		}
		stopSick := startSick(t, kvs[0], b, key)
		var claims claimLog
		drawn, stopCrowd := startCrowd(t, kvs[1:], key, &claims)

		deleted := time.Now()
		if early := claims.between(time.Time{}, deleted); len(early) > 0 {
			t.Logf("round %d: a claim came before the delete (%v): a delay ended first; next round", round, early[0])
			stopCrowd()
			stopSick()
			continue
		}
		if err := admin.Delete(ctx, key); err != nil {
			t.Fatal(err)
		}
		// A removal keeps every candidate away for the vouch wait (at most a
		// quarter TTL) after it was seen; the first claim comes then.
		testenv.Eventually(t, "a claim after the delete", awaitTimeout, func() bool { return len(claims.between(deleted, time.Now())) > 0 })
		firstClaim := claims.between(deleted, time.Now())[0].at
		window := firstClaim.Add(100 * time.Millisecond)
		// The count is of the claims sent in the window, so wait until it
		// has passed, and 50 ms more for the last ones to be logged: a
		// moment in time, not an event.
		<-time.After(time.Until(window.Add(50 * time.Millisecond)))
		ended := 0 // delays over by the end of the window: those candidates claim then in any case
		for _, d := range drawn {
			if d.at.Add(d.delay).Before(window) {
				ended++
			}
		}
		reportClaims(t, drawn, &claims, deleted)
		sent := claims.between(firstClaim, window)
		failed := countFailed(sent)
		t.Logf("round %d: the first claim %v after the delete; claims within 100 ms of it: %d (%d failed); delays ended by then: %d of %d",
			round, firstClaim.Sub(deleted).Round(time.Millisecond), len(sent), failed, ended, crowd)
		if len(sent) > ended+1 {
			t.Errorf("%d claims within 100 ms (%d failed) after a delete of the free key, which no candidate wrote; only %d of %d start delays had ended",
				len(sent), failed, ended, crowd)
		}
		return
	}
}

// TestACrowdInItsStartDelaysDoesNotClaimTogetherOnAnExpiryMarker: as
// above, but nobody writes the key: the free key's latest entry (a
// release, with a per-message TTL of 1 s, as a bucket with LimitMarkerTTL
// allows) ages out while a crowd of three waits, and the server writes its
// expiry marker. Asserted: no claim before the first start delay ended.
//
// A round counts once every delay ends 2 s or more after the release was
// written, and after the marker came; otherwise the test goes on with a
// fresh key and crowd. The delays are drawn within a fraction of a second
// of the release, so each outlasts 2 s with probability about 0.56 (2.2 s
// of 5 s under it) and all three with about 0.17; the marker comes about
// 1 s after the release. 80 rounds all lost come with probability about
// 0.83^80 ≈ 3e-7.
func TestACrowdInItsStartDelaysDoesNotClaimTogetherOnAnExpiryMarker(t *testing.T) {
	t.Parallel()
	const crowd, rounds = 3, 80
	s, admin := serverWith(t, jetstream.KeyValueConfig{Bucket: "HERDEXP", TTL: splayTTL, LimitMarkerTTL: time.Second})
	kvs := handles(t, s.ClientURL(), "HERDEXP", crowd+1)
	_, js := testenv.Connect(t, s.ClientURL())
	b := openBucket(t, admin)
	ctx := context.Background()
	for round := 0; ; round++ {
		if round == rounds {
			t.Fatalf("%d rounds drew no crowd whose delays all outlast the marker", rounds)
		}
		key := fmt.Sprintf("k%d", round)
		stopSick := startSick(t, kvs[0], b, key)
		if _, err := js.Publish(ctx, "$KV.HERDEXP."+key, []byte("released:old"), jetstream.WithMsgTTL(time.Second)); err != nil {
			t.Fatal(err)
		}
		published := time.Now()
		var claims claimLog
		drawn, stopCrowd := startCrowd(t, kvs[1:], key, &claims)
		next := func() { stopCrowd(); stopSick() }
		first := drawn[0].at.Add(drawn[0].delay)
		for _, d := range drawn {
			if end := d.at.Add(d.delay); end.Before(first) {
				first = end
			}
		}
		if first.Sub(published) < 2*time.Second {
			next() // a delay ends before the marker surely came
			continue
		}
		w, err := admin.Watch(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		var marker time.Time
		for marker.IsZero() {
			select {
			case e := <-w.Updates():
				if e != nil && e.Operation() != jetstream.KeyValuePut {
					marker = time.Now()
				}
			case <-time.After(awaitTimeout):
				t.Fatal("no expiry marker")
			}
		}
		if err := w.Stop(); err != nil {
			t.Fatal(err)
		}
		if !marker.Before(first) {
			t.Logf("round %d: the marker came %v after the first delay ended; next round", round, marker.Sub(first))
			next()
			continue
		}
		// The assertion is about the claims sent before the first delay
		// ended, so wait for that moment, and 50 ms more for them to be
		// logged: a moment in time, not an event.
		<-time.After(time.Until(first.Add(50 * time.Millisecond)))
		reportClaims(t, drawn, &claims, published)
		before := claims.between(time.Time{}, first)
		failed := countFailed(before)
		t.Logf("round %d: marker %v after the release was written, the first delay ended %v after it; claims before any delay ended: %d (%d failed)",
			round, marker.Sub(published).Round(time.Millisecond), first.Sub(published).Round(time.Millisecond), len(before), failed)
		if len(before) > 0 {
			t.Errorf("%d of %d candidates claimed (%d failed) on the server's expiry marker, before any start delay ended: nobody wrote the key, yet the delays ended",
				len(before), crowd, failed)
		}
		next()
		return
	}
}

// TestACrowdWhoseWinnersStopAtOnceHasOneLeaderAndHandsOverFast: eight
// candidates started together with the start delay on (TTL 2 s and 10 s),
// beside a listed one that never claims, so that each draws a delay; each
// winner stops as soon as it leads, releasing the key, until one is left.
// Asserted: no two leadership contexts are ever live together, IsLeader is
// never true on two at once (sampled every 2 ms), tokens rise, and each
// release is taken within a second, even by candidates still in their
// start delay (a release is a write by another candidate, which ends it).
// Logged: the handover times and the claims around the first release.
func TestACrowdWhoseWinnersStopAtOnceHasOneLeaderAndHandsOverFast(t *testing.T) {
	t.Parallel()
	for _, ttl := range []time.Duration{2 * time.Second, splayTTL} {
		t.Run(ttl.String(), func(t *testing.T) {
			const crowd = 8
			bucket := fmt.Sprintf("STOPCROWD%d", ttl/time.Second)
			s, admin := serverWith(t, jetstream.KeyValueConfig{Bucket: bucket, TTL: ttl})
			kvs := handles(t, s.ClientURL(), bucket, crowd+1)
			startSick(t, kvs[crowd], openBucket(t, admin), "k") // so that each of the crowd draws a start delay
			kvs = kvs[:crowd]
			delays := make(chan drawnDelay, crowd)
			var claims claimLog
			type win struct {
				name  string
				token uint64
				at    time.Time
			}
			var (
				mu      sync.Mutex
				leading = map[string]context.Context{}
				last    uint64
			)
			wins := make(chan win, 4*crowd)
			elections, stops := map[string]*election.Election{}, map[string]func(){}
			for i, kv := range kvs {
				name := fmt.Sprintf("c%d", i)
				e, err := election.NewElection(context.Background(), name, "k", &claimCountKV{KeyValue: kv, key: "k", name: name, log: &claims},
					election.WithLogger(slog.New(&startDelayLog{name: name, delays: delays})),
					election.OnWon(func(ctx context.Context) {
						token, _ := election.TokenFromContext(ctx)
						mu.Lock()
						for other, octx := range leading {
							if octx.Err() == nil {
								t.Errorf("%s won (token %d) while %s's leadership is live", name, token, other)
							}
						}
						if token <= last {
							t.Errorf("%s won with token %d, not above the last %d", name, token, last)
						}
						last = token
						leading[name] = ctx
						mu.Unlock()
						wins <- win{name, token, time.Now()}
					}))
				if err != nil {
					t.Fatal(err)
				}
				elections[name], stops[name] = e, run(t, e)
			}
			sampling, stopSampling := context.WithCancel(context.Background())
			sampled := make(chan struct{})
			go func() {
				defer close(sampled)
				tick := time.NewTicker(2 * time.Millisecond)
				defer tick.Stop()
				for {
					select {
					case <-sampling.Done():
						return
					case <-tick.C:
					}
					var both []string
					for name, e := range elections {
						if e.IsLeader() {
							both = append(both, name)
						}
					}
					if len(both) > 1 {
						t.Errorf("IsLeader true on %v at once", both)
						return
					}
				}
			}()
			defer func() { stopSampling(); <-sampled }()

			var released, firstRelease, secondWin time.Time
			var handovers []string
			for left := crowd; left > 1; left-- {
				var w win
				select {
				case w = <-wins:
				case <-time.After(awaitTimeout):
					t.Fatalf("no leader with %d candidates left", left)
				}
				if !released.IsZero() && secondWin.IsZero() {
					secondWin = w.at
				}
				if !released.IsZero() {
					took := w.at.Sub(released)
					handovers = append(handovers, took.Round(100*time.Microsecond).String())
					if took > time.Second {
						t.Errorf("%s led %v after the release, want within a second", w.name, took)
					}
				}
				released = time.Now()
				if firstRelease.IsZero() {
					firstRelease = released
				}
				stops[w.name]() // releases the key once OnWon returned
			}
			select {
			case w := <-wins:
				handovers = append(handovers, w.at.Sub(released).Round(100*time.Microsecond).String())
			case <-time.After(awaitTimeout):
				t.Fatal("the last candidate never led")
			}
			before := claims.between(time.Time{}, firstRelease)
			after := claims.between(firstRelease, secondWin)
			t.Logf("%d of %d drew a start delay; handovers after each Stop: %v; claims before the first release: %d (%d failed), between it and the next win: %d (%d failed)",
				len(delays), crowd, handovers, len(before), countFailed(before), len(after), countFailed(after))
		})
	}
}

// releaseSeenKV is a real bucket whose watchers report when they have
// handed the library a release of key (the value rel): the entry is sent
// again after it, and that second send completes only once the library's
// watcher applied the first.
type releaseSeenKV struct {
	jetstream.KeyValue
	key, rel string
	seen     chan struct{} // closed once the release was applied
	once     sync.Once
}

type forwardedWatcher struct {
	jetstream.KeyWatcher
	updates chan jetstream.KeyValueEntry
	ended   chan struct{}
	once    sync.Once
}

func (w *forwardedWatcher) Updates() <-chan jetstream.KeyValueEntry { return w.updates }
func (w *forwardedWatcher) Stop() error {
	w.once.Do(func() { close(w.ended) })
	return w.KeyWatcher.Stop()
}

func (k *releaseSeenKV) WatchAll(ctx context.Context, opts ...jetstream.WatchOpt) (jetstream.KeyWatcher, error) {
	w, err := k.KeyValue.WatchAll(ctx, opts...)
	if err != nil {
		return nil, err
	}
	return k.wrap(w), nil
}

func (k *releaseSeenKV) WatchFiltered(ctx context.Context, keys []string, opts ...jetstream.WatchOpt) (jetstream.KeyWatcher, error) {
	w, err := k.KeyValue.WatchFiltered(ctx, keys, opts...)
	if err != nil {
		return nil, err
	}
	return k.wrap(w), nil
}

func (k *releaseSeenKV) wrap(w jetstream.KeyWatcher) jetstream.KeyWatcher {
	fw := &forwardedWatcher{KeyWatcher: w, updates: make(chan jetstream.KeyValueEntry), ended: make(chan struct{})}
	go func() {
		defer close(fw.updates)
		send := func(e jetstream.KeyValueEntry) bool {
			select {
			case fw.updates <- e:
				return true
			case <-fw.ended:
				return false
			}
		}
		for {
			var e jetstream.KeyValueEntry
			select {
			case <-fw.ended:
				return
			case got, ok := <-w.Updates():
				if !ok {
					return
				}
				e = got
			}
			if !send(e) {
				return
			}
			if e != nil && e.Key() == k.key && string(e.Value()) == k.rel {
				if !send(e) { // the same entry again: an unchanged view
					return
				}
				k.once.Do(func() { close(k.seen) })
			}
		}
	}()
	return fw
}

// TestAClaimAndReleaseRightAfterTheStartDelayIsDrawnEndIt: b draws its
// start delay (2 s or more) for the free key, beside a listed candidate
// that never claims; its logger holds it on the line that logs the delay,
// that is after the delay was drawn and before it waits. Meanwhile a claims
// the key and releases it, and b's watcher applies the release; then b goes
// on. Asserted: b leads within a second. The claim and the release are
// puts over the revision the delay was drawn on, so they end it, even
// though both had landed before the delay's wait looked at the key. A draw
// is under 2 s with probability 0.4; 15 such rounds come with probability
// 0.4^15 ≈ 1e-6.
func TestAClaimAndReleaseRightAfterTheStartDelayIsDrawnEndIt(t *testing.T) {
	t.Parallel()
	s, admin := serverWith(t, jetstream.KeyValueConfig{Bucket: "SPLAYGAP", TTL: splayTTL})
	kvs := handles(t, s.ClientURL(), "SPLAYGAP", 3)
	bucket := openBucket(t, admin)
	for round := 0; ; round++ {
		if round == 15 {
			t.Fatal("15 rounds drew no start delay of 2 s or more")
		}
		key := fmt.Sprintf("k%d", round)
		stopSick := startSick(t, kvs[0], bucket, key)
		delays := make(chan drawnDelay, 1)
		proceed := make(chan struct{})
		var unblock sync.Once
		release := func() { unblock.Do(func() { close(proceed) }) }
		t.Cleanup(release)
		bWon := make(chan time.Time, 1)
		bkv := &releaseSeenKV{KeyValue: kvs[1], key: key, rel: "released:a", seen: make(chan struct{})}
		b, err := election.NewElection(context.Background(), "b", key, bkv,
			election.WithLogger(slog.New(&startDelayLog{name: "b", delays: delays, proceed: proceed})),
			election.OnWon(func() { bWon <- time.Now() }))
		if err != nil {
			t.Fatal(err)
		}
		stopRun := run(t, b)
		stopB := func() { release(); stopRun() }
		var delay time.Duration
		select {
		case drawn := <-delays:
			delay = drawn.delay
		case <-time.After(awaitTimeout):
			t.Fatal("b drew no start delay")
		}
		if delay < 2*time.Second {
			stopB()
			stopSick()
			continue
		}
		aWon := make(chan struct{})
		a, err := election.NewElection(context.Background(), "a", key, kvs[2], election.WithoutSplay(),
			election.OnWon(func() { close(aWon) }))
		if err != nil {
			t.Fatal(err)
		}
		stopA := run(t, a)
		select {
		case <-aWon:
		case <-time.After(awaitTimeout):
			t.Fatal("a never led")
		}
		stopA()
		select {
		case <-bkv.seen:
		case <-time.After(awaitTimeout):
			t.Fatal("b's watcher never applied a's release")
		}
		released := time.Now()
		release() // b goes on into its start delay
		select {
		case won := <-bWon:
			took := won.Sub(released)
			t.Logf("round %d: b led %v after it went on past a's release; its start delay was %v", round, took.Round(100*time.Microsecond), delay.Round(time.Millisecond))
			if took > time.Second {
				t.Errorf("b led %v after a's claim and release, which came after b drew its delay of %v: it waited the delay out", took, delay)
			}
		case <-time.After(awaitTimeout):
			t.Error("b never led")
		}
		stopB()
		stopSick()
		return
	}
}

// TestStopDuringTheStartDelayReturnsAtOnce: a candidate waiting out its
// start delay (2 s or more, beside a listed candidate that never claims)
// is stopped. Asserted: Stop returns within 500 ms, and the candidate sent
// no claim. A draw is under 2 s with probability 0.4; 15 such rounds come
// with probability 0.4^15 ≈ 1e-6.
func TestStopDuringTheStartDelayReturnsAtOnce(t *testing.T) {
	t.Parallel()
	s, admin := serverWith(t, jetstream.KeyValueConfig{Bucket: "SPLAYSTOP", TTL: splayTTL})
	kvs := handles(t, s.ClientURL(), "SPLAYSTOP", 2)
	bucket := openBucket(t, admin)
	for round := 0; ; round++ {
		if round == 15 {
			t.Fatal("15 rounds drew no start delay of 2 s or more")
		}
		key := fmt.Sprintf("k%d", round)
		stopSick := startSick(t, kvs[0], bucket, key)
		var claims claimLog
		drawn, stop := startCrowd(t, kvs[1:], key, &claims)
		if drawn[0].delay < 2*time.Second {
			stop()
			stopSick()
			continue
		}
		began := time.Now()
		stop()
		if took := time.Since(began); took > 500*time.Millisecond {
			t.Errorf("Stop took %v during a start delay of %v", took, drawn[0].delay)
		}
		if sent := claims.between(time.Time{}, time.Now()); len(sent) > 0 {
			t.Errorf("claims sent by a candidate stopped in its start delay: %v", sent)
		}
		return
	}
}

// drawnDelay is a start delay a candidate logged, and when.
type drawnDelay struct {
	name  string
	delay time.Duration
	at    time.Time
}

// startDelayLog is a logger's handler that sends the start delay a
// candidate logs to delays, and drops every other record. With proceed
// set, it then holds the logging goroutine until proceed is closed, as a
// log handler that blocks (a full pipe), or a goroutine preempted, would
// between the draw of the delay and its wait.
type startDelayLog struct {
	name    string
	delays  chan<- drawnDelay
	proceed <-chan struct{}
}

func (*startDelayLog) Enabled(context.Context, slog.Level) bool { return true }
func (h *startDelayLog) WithAttrs([]slog.Attr) slog.Handler     { return h }
func (h *startDelayLog) WithGroup(string) slog.Handler          { return h }
func (h *startDelayLog) Handle(_ context.Context, r slog.Record) error {
	if !strings.Contains(r.Message, "start delay") {
		return nil
	}
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "delay" {
			h.delays <- drawnDelay{name: h.name, delay: a.Value.Duration(), at: time.Now()}
		}
		return true
	})
	if h.proceed != nil {
		<-h.proceed
	}
	return nil
}

// startSick starts a listed candidate of key that never claims (its health
// check fails), so that candidates started after it find the key free and
// another candidate listed: each draws a start delay. It returns once the
// candidate is listed, with a func that stops it (also called at cleanup).
func startSick(t *testing.T, kv jetstream.KeyValue, b *election.Bucket, key string) (stop func()) {
	t.Helper()
	sick, err := election.NewElection(context.Background(), "sick", key, kv, election.WithoutSplay(),
		election.WithHealthCheck(func(context.Context) error { return errors.New("sick") }, election.MinHealthInterval, 1))
	if err != nil {
		t.Fatal(err)
	}
	stop = run(t, sick)
	testenv.Eventually(t, "the sick candidate to be listed", awaitTimeout, func() bool {
		c, err := b.Candidates(context.Background(), key)
		return err == nil && len(c) == 1
	})
	return stop
}

// claimLog records the claims (writes of a candidate's own name to the
// election key) that candidates send, with when they were sent and whether
// they failed.
type claimLog struct {
	mu     sync.Mutex
	claims []claimSent
}

type claimSent struct {
	name   string
	at     time.Time
	failed bool
}

func (l *claimLog) add(c claimSent) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.claims = append(l.claims, c)
}

// between returns the claims sent in [from, to).
func (l *claimLog) between(from, to time.Time) []claimSent {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []claimSent
	for _, c := range l.claims {
		if !c.at.Before(from) && c.at.Before(to) {
			out = append(out, c)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].at.Before(out[j].at) })
	return out
}

// claimCountKV is a real bucket that logs each Create or Update of key
// with the candidate's own name as value.
type claimCountKV struct {
	jetstream.KeyValue
	key, name string
	log       *claimLog
}

func (k *claimCountKV) Update(ctx context.Context, key string, value []byte, last uint64) (uint64, error) {
	at := time.Now()
	rev, err := k.KeyValue.Update(ctx, key, value, last)
	if key == k.key && string(value) == k.name {
		k.log.add(claimSent{name: k.name, at: at, failed: err != nil})
	}
	return rev, err
}

func (k *claimCountKV) Create(ctx context.Context, key string, value []byte, opts ...jetstream.KVCreateOpt) (uint64, error) {
	at := time.Now()
	rev, err := k.KeyValue.Create(ctx, key, value, opts...)
	if key == k.key && string(value) == k.name {
		k.log.add(claimSent{name: k.name, at: at, failed: err != nil})
	}
	return rev, err
}

// startCrowd starts n candidates of key together, splay on, each on its
// own connection with its claims logged, and waits until each has drawn
// its start delay.
func startCrowd(t *testing.T, kvs []jetstream.KeyValue, key string, log *claimLog, opts ...election.Option) ([]drawnDelay, func()) {
	t.Helper()
	delays := make(chan drawnDelay, len(kvs))
	var stops []func()
	stopAll := func() {
		for _, stop := range stops {
			stop()
		}
	}
	for i, kv := range kvs {
		name := fmt.Sprintf("c%d", i)
		all := append([]election.Option{election.WithLogger(slog.New(&startDelayLog{name: name, delays: delays}))}, opts...)
		e, err := election.NewElection(context.Background(), name, key, &claimCountKV{KeyValue: kv, key: key, name: name, log: log}, all...)
		if err != nil {
			t.Fatal(err)
		}
		stops = append(stops, run(t, e))
	}
	var drawn []drawnDelay
	for range kvs {
		select {
		case d := <-delays:
			drawn = append(drawn, d)
		case <-time.After(awaitTimeout):
			t.Fatalf("only %d of %d candidates drew a start delay", len(drawn), len(kvs))
		}
	}
	return drawn, stopAll
}

func countFailed(claims []claimSent) int {
	n := 0
	for _, c := range claims {
		if c.failed {
			n++
		}
	}
	return n
}

// reportClaims logs the delays drawn and every claim since from.
func reportClaims(t *testing.T, drawn []drawnDelay, claims *claimLog, from time.Time) {
	t.Helper()
	var ds []string
	sort.Slice(drawn, func(i, j int) bool { return drawn[i].at.Add(drawn[i].delay).Before(drawn[j].at.Add(drawn[j].delay)) })
	for _, d := range drawn {
		ds = append(ds, fmt.Sprintf("%s ends at +%v", d.name, d.at.Add(d.delay).Sub(from).Round(time.Millisecond)))
	}
	var cs []string
	for _, c := range claims.between(from, time.Now()) {
		cs = append(cs, fmt.Sprintf("%s +%v failed=%v", c.name, c.at.Sub(from).Round(100*time.Microsecond), c.failed))
	}
	t.Logf("delays: %v", ds)
	t.Logf("claims: %v", cs)
}
