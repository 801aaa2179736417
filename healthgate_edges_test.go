package election_test

// WithHealthCheck at its edges (healthgate.go, docs/health.md): checks that
// ignore their context, Once, standbys, verdicts that change while the
// work stops, lost renewal answers, candidates awaiting their first check.

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/kvelect/election"
	"github.com/kvelect/election/internal/testenv"
	"github.com/nats-io/nats.go/jetstream"
)

// TestAWedgedCheckCountsAsFailed runs a check that ignores its context (a
// database driver blocked in a read, a mutex the wedged app holds): it
// counts as failed once its interval has passed, and at each interval
// after, so the leader of a wedged app stands down; Stop returns without
// waiting for it.
func TestAWedgedCheckCountsAsFailed(t *testing.T) {
	t.Parallel()
	s := testenv.Server(t)
	_, js := testenv.Connect(t, s.ClientURL())
	const ttl = 4 * time.Second
	kv := testenv.Bucket(t, js, jetstream.KeyValueConfig{Bucket: "ATTACKWEDGED", TTL: ttl})
	b := openBucket(t, kv)

	var mu sync.Mutex
	wedged := false
	unwedge := make(chan struct{})
	check := func(ctx context.Context) error {
		mu.Lock()
		w := wedged
		mu.Unlock()
		if w {
			<-unwedge // ignores ctx, as a blocked driver call does
		}
		return nil
	}
	lost := make(chan error, 4)
	won := make(chan struct{}, 4)
	a, err := b.NewElection("a", "svc",
		election.WithHealthCheck(check, healthInterval, healthFailures), election.WithoutSplay(),
		election.OnWon(func() { won <- struct{}{} }), election.OnLost(func(cause error) { lost <- cause }))
	if err != nil {
		t.Fatal(err)
	}
	startDone := make(chan error, 1)
	go func() { startDone <- a.Start(context.Background()) }()
	// Unwedge before anything else cleans up, so that nothing leaks.
	t.Cleanup(func() {
		close(unwedge)
		a.Stop()
		<-startDone
	})
	select {
	case <-won:
	case <-time.After(5 * time.Second):
		t.Fatal("a did not lead")
	}
	other := startGated(t, b, "b", "svc", &appHealth{}, election.WithoutSplay())
	awaitCandidates(t, b, "svc", 2)

	mu.Lock()
	wedged = true
	mu.Unlock()
	// The documented bound: failures checks, the first starting at most an
	// interval after the wedge, each failing at its interval's end; allow a
	// generous second more.
	limit := (healthFailures+1)*healthInterval + time.Second
	select {
	case cause := <-lost:
		if !errors.Is(cause, election.ErrHealthCheck) {
			t.Fatalf("a stood down for %v, want ErrHealthCheck", cause)
		}
		<-other.won
	case <-time.After(limit):
		t.Errorf("a's check has not returned for %v (its interval is %v), yet a still leads (IsLeader %v): a wedged check never counts as failed", limit, healthInterval, a.IsLeader())
	}

	stopped := make(chan struct{})
	go func() { a.Stop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(3 * time.Second):
		t.Errorf("Stop has not returned 3s after it was called: it waits for a check that ignores its context")
	}
}

// TestOnceWaitsForTheFirstCheck runs Once with a wait of 0 on a free key
// and a healthy check that takes a moment: it waits for the first check
// before its claim, as Start does, and runs the job.
func TestOnceWaitsForTheFirstCheck(t *testing.T) {
	t.Parallel()
	s := testenv.Server(t)
	_, js := testenv.Connect(t, s.ClientURL())
	kv := testenv.Bucket(t, js, jetstream.KeyValueConfig{Bucket: "ATTACKONCE", TTL: 4 * time.Second})

	// A passing check that takes 150 ms, as a round trip to a database may.
	check := func(ctx context.Context) error {
		select {
		case <-time.After(150 * time.Millisecond):
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	e, err := election.NewElection(context.Background(), "cron-1", "job", kv, election.WithHealthCheck(check, time.Second, 3))
	if err != nil {
		t.Fatal(err)
	}
	defer e.Stop()
	ran := false
	outcome, err := e.Once(context.Background(), 0, func(context.Context) error { ran = true; return nil })
	if err != nil {
		t.Fatal(err)
	}
	if outcome != election.OnceRan || !ran {
		entry, gerr := kv.Get(context.Background(), "job")
		t.Errorf("Once on a free key with a healthy (if 150 ms slow) check: %v (ran %v), want ran; the key holds %v (%v)", outcome, ran, entry, gerr)
	}
}

// TestOnceWithAFailingCheckSaysUnhealthy runs Once whose check fails on a
// free key: it claims nothing and says why (OnceUnhealthy, an error matching
// ErrHealthCheck), not that another candidate holds the key.
func TestOnceWithAFailingCheckSaysUnhealthy(t *testing.T) {
	t.Parallel()
	s := testenv.Server(t)
	_, js := testenv.Connect(t, s.ClientURL())
	kv := testenv.Bucket(t, js, jetstream.KeyValueConfig{Bucket: "ATTACKONCEFAIL", TTL: 4 * time.Second})

	check := func(context.Context) error { return errors.New("no database") }
	e, err := election.NewElection(context.Background(), "cron-1", "job", kv, election.WithHealthCheck(check, 50*time.Millisecond, 1))
	if err != nil {
		t.Fatal(err)
	}
	defer e.Stop()
	outcome, err := e.Once(context.Background(), 500*time.Millisecond, func(context.Context) error { return nil })
	if _, gerr := kv.Get(context.Background(), "job"); !errors.Is(gerr, jetstream.ErrKeyNotFound) {
		t.Fatalf("the key: %v, want none", gerr)
	}
	if outcome == election.OnceOtherLeader {
		t.Errorf("Once with a failing check on a free key: %v, %v: it says another candidate holds the key, and nobody does", outcome, err)
	}
}

// TestAStandbyReportsItsHealth runs a standby (priority 0) whose check
// fails: it emits EventHealth, as its record says Unhealthy, so the gauge
// kvelect_election_health_check_failing and the record agree.
func TestAStandbyReportsItsHealth(t *testing.T) {
	t.Parallel()
	s := testenv.Server(t)
	_, js := testenv.Connect(t, s.ClientURL())
	kv := testenv.Bucket(t, js, jetstream.KeyValueConfig{Bucket: "ATTACKSTANDBY", TTL: 4 * time.Second})
	b := openBucket(t, kv)

	sick := &appHealth{}
	sick.fail(errors.New("replica lag"))
	standby := startGated(t, b, "standby", "svc", sick, election.WithPriority(0))
	testenv.Poll(t, "the standby's record to say Unhealthy", 5*time.Second, func() ([]election.Candidate, bool) {
		cands, err := b.Candidates(context.Background(), "svc")
		return cands, err == nil && len(cands) == 1 && cands[0].Unhealthy != ""
	})
	select {
	case ev := <-standby.events:
		if !errors.Is(ev.Err, election.ErrHealthCheck) {
			t.Errorf("the standby's health event: %+v, want ErrHealthCheck", ev)
		}
	case <-time.After(time.Second):
		t.Errorf("the standby's record says its check fails, but no EventHealth came in 1s (10 checks)")
	}
}

// TestHealthChangesWhileWorkStopsAreReported makes a leader stand down for
// its check while its OnWon takes 1.5 s to stop, and flaps its check
// (passing for 400 ms, then failing again) meanwhile: the other candidate
// leads only after the old leader's OnWon returned, at once then, and each
// change of verdict is an EventHealth though the campaign goroutine waits
// for the work.
func TestHealthChangesWhileWorkStopsAreReported(t *testing.T) {
	t.Parallel()
	s := testenv.Server(t)
	_, js := testenv.Connect(t, s.ClientURL())
	const ttl = 6 * time.Second
	kv := testenv.Bucket(t, js, jetstream.KeyValueConfig{Bucket: "ATTACKFLAP", TTL: ttl})
	b := openBucket(t, kv)

	var mu sync.Mutex
	var returnedAt time.Time
	aWon := make(chan struct{}, 4)
	slowStop := election.OnWon(func(ctx context.Context) { // replaces startGated's OnWon
		aWon <- struct{}{}
		<-ctx.Done()
		time.Sleep(1500 * time.Millisecond)
		mu.Lock()
		returnedAt = time.Now()
		mu.Unlock()
	})
	t0 := time.Now()
	aLost := make(chan error, 4) // EventLost, at stand-down (OnLost runs only once OnWon returned)
	bWonAt := make(chan time.Time, 4)
	trace := election.WithEventHook(func(ev election.Event) {
		t.Logf("%7v %s %v token=%d err=%v", time.Since(t0).Round(time.Millisecond), ev.Name, ev.Kind, ev.Token, ev.Err)
		switch {
		case ev.Name == "a" && ev.Kind == election.EventLost:
			aLost <- ev.Err
		case ev.Name == "b" && ev.Kind == election.EventWon:
			bWonAt <- time.Now()
		}
	})
	a := startGated(t, b, "a", "svc", &appHealth{}, election.WithoutSplay(), slowStop, trace)
	<-aWon
	startGated(t, b, "b", "svc", &appHealth{}, election.WithoutSplay(), trace)
	awaitCandidates(t, b, "svc", 2)

	began := time.Now()
	a.health.fail(errors.New("database unreachable"))
	select {
	case cause := <-aLost:
		if !errors.Is(cause, election.ErrHealthCheck) {
			t.Fatalf("a stood down for %v, want ErrHealthCheck", cause)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("a did not stand down")
	}
	// OnWon is stopping (1.5 s): flap the check meanwhile. Each change is
	// reported while the work stops, before OnWon returns.
	var kinds []string
	next := func(change func()) {
		change()
		select {
		case ev := <-a.events:
			kind := "pass"
			if ev.Err != nil {
				kind = "fail"
			}
			kinds = append(kinds, kind)
		case <-time.After(time.Second):
			t.Errorf("a's health events: %v, then none for 1s", kinds)
		}
	}
	next(func() {}) // the failure that stood a down
	next(a.health.pass)
	next(func() { a.health.fail(errors.New("database unreachable again")) })
	mu.Lock()
	returnedEarly := !returnedAt.IsZero()
	mu.Unlock()
	if !slices.Equal(kinds, []string{"fail", "pass", "fail"}) || returnedEarly {
		t.Errorf("a's health events while its work stopped: %v (OnWon returned first: %v), want fail, pass, fail before it returned", kinds, returnedEarly)
	}

	var wonAt time.Time
	select {
	case wonAt = <-bWonAt:
	case <-time.After(ttl / 2):
		t.Fatal("b did not lead within half a TTL: the key was not released")
	}
	mu.Lock()
	ret := returnedAt
	mu.Unlock()
	switch {
	case ret.IsZero() || wonAt.Before(ret):
		t.Errorf("b led before a's OnWon returned (returned %v): two leaders' work overlapped", ret)
	case wonAt.Sub(ret) > 300*time.Millisecond:
		t.Errorf("b led %v after a's OnWon returned, want at once", wonAt.Sub(ret))
	}
	t.Logf("b led %v after a's check began to fail, %v after a's OnWon returned", wonAt.Sub(began).Round(time.Millisecond), wonAt.Sub(ret).Round(time.Millisecond))
}

// lossyKV is a bucket whose next Update of key, once armed, is applied but
// answered with a timeout, as when the answer is lost; lost runs first.
type lossyKV struct {
	jetstream.KeyValue
	key   string
	armed chan func() // a send arms it with the function to run on the loss
}

func (k *lossyKV) Update(ctx context.Context, key string, value []byte, last uint64) (uint64, error) {
	rev, err := k.KeyValue.Update(ctx, key, value, last)
	if key != k.key || err != nil {
		return rev, err
	}
	select {
	case lost := <-k.armed:
		lost()
		time.Sleep(60 * time.Millisecond) // the health check fails meanwhile
		return 0, context.DeadlineExceeded
	default:
		return rev, err
	}
}

// TestAHealthStandDownAfterALostRenewalAnswerReleases makes a leader's
// renewal apply with its answer lost, and its check fail (failures 1)
// while it waited for that answer: the release goes over the renewal once
// the watcher shows it (adoptLostRenewal), and the other candidate leads at
// once rather than a TTL later when the key expires. The hold loop picks
// the health wake before the watcher's news about half the time, which is
// the case this covers.
func TestAHealthStandDownAfterALostRenewalAnswerReleases(t *testing.T) {
	t.Parallel()
	s := testenv.Server(t)
	_, js := testenv.Connect(t, s.ClientURL())
	const ttl = 4 * time.Second
	kv := testenv.Bucket(t, js, jetstream.KeyValueConfig{Bucket: "ATTACKLOSTREN", TTL: ttl})
	b := openBucket(t, kv)

	lossy := &lossyKV{KeyValue: kv, key: "svc", armed: make(chan func(), 1)}
	health := &appHealth{}
	aLost := make(chan time.Time, 4)
	aWon := make(chan struct{}, 4)
	a, err := election.NewElection(context.Background(), "a", "svc", lossy,
		election.WithHealthCheck(health.check, 10*time.Millisecond, 1), election.WithoutSplay(),
		election.OnWon(func() { aWon <- struct{}{} }),
		election.WithEventHook(func(ev election.Event) {
			if ev.Kind == election.EventLost {
				aLost <- time.Now()
			}
		}))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- a.Start(context.Background()) }()
	t.Cleanup(func() { a.Stop(); <-done })
	<-aWon
	other := startGated(t, b, "b", "svc", &appHealth{}, election.WithoutSplay())
	awaitCandidates(t, b, "svc", 2)

	lossy.armed <- func() { health.fail(errors.New("database unreachable")) }
	var stoodDown time.Time
	select {
	case stoodDown = <-aLost:
	case <-time.After(ttl):
		t.Fatal("a did not stand down")
	}
	select {
	case <-other.won:
		if took := time.Since(stoodDown); took > ttl/4 {
			t.Errorf("b led %v after a stood down for its health, want at once", took)
		}
	case <-time.After(ttl / 4):
		entry, _ := kv.Get(context.Background(), "svc")
		t.Errorf("b does not lead %v after a stood down for its health: a's release did not land, the key holds %q (revision %d) and is left to expire", ttl/4, entry.Value(), entry.Revision())
	}
}

// TestTransferRefusesACandidateAwaitingItsFirstCheck transfers the key to
// a candidate whose first check has not returned (it hangs to its interval
// of 3 s): its record says so (Candidate.Unhealthy), it would claim
// nothing, and Transfer returns ErrNotTransferred at once instead of
// leaving the key leaderless for half a TTL.
func TestTransferRefusesACandidateAwaitingItsFirstCheck(t *testing.T) {
	t.Parallel()
	s := testenv.Server(t)
	_, js := testenv.Connect(t, s.ClientURL())
	const ttl = 4 * time.Second
	kv := testenv.Bucket(t, js, jetstream.KeyValueConfig{Bucket: "ATTACKFIRSTCHECK", TTL: ttl})
	b := openBucket(t, kv)

	leader := startGated(t, b, "leader", "svc", &appHealth{}, election.WithoutSplay())
	<-leader.won

	// Its database is down: each check hangs to the end of its interval.
	hangs := func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() }
	sick, err := b.NewElection("sick", "svc", election.WithHealthCheck(hangs, 3*time.Second, 1), election.WithoutSplay())
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- sick.Start(context.Background()) }()
	t.Cleanup(func() { sick.Stop(); <-done })
	cands := awaitCandidates(t, b, "svc", 2)
	for _, c := range cands {
		if c.Name == "sick" {
			t.Logf("sick's record: Unhealthy %q", c.Unhealthy)
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), ttl)
	defer cancel()
	// The winner may announce before the Bucket's watcher delivers its claim.
	testenv.Poll(t, "the Bucket to show leader leading", ttl, func() (election.Leader, bool) {
		l, err := b.Leader(ctx, "svc")
		return l, err == nil && l.Name == "leader"
	})
	began := time.Now()
	now, err := b.Transfer(ctx, "svc", "sick")
	took := time.Since(began)
	if !errors.Is(err, election.ErrNotTransferred) || took > 500*time.Millisecond {
		t.Errorf("Transfer to a candidate that claims nothing until its first check passes: %v after %v (now %+v), want ErrNotTransferred at once, not a handoff nobody takes", err, took.Round(time.Millisecond), now)
	}
}
