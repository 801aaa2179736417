package integration

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvelect/election"
	"github.com/kvelect/election/internal/testenv"
	"github.com/nats-io/nats.go/jetstream"
)

// onceElection makes an election for key "job" named name on kv.
func onceElection(t *testing.T, kv jetstream.KeyValue, name string) *election.Election {
	t.Helper()
	e, err := election.NewElection(context.Background(), name, "job", kv, election.WithoutSplay(), election.WithLogger(testenv.Logger(t).With("candidate", name)))
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func TestOnceRunsOnAFreeKeyAndMarksItDoneForATTL(t *testing.T) {
	t.Parallel()
	s, admin := serverWithBucket(t, "ONCE")
	kvs := handles(t, s.ClientURL(), "ONCE", 2)

	var token uint64
	outcome, err := onceElection(t, kvs[0], "a").Once(context.Background(), 0, func(ctx context.Context) error {
		token, _ = election.TokenFromContext(ctx)
		return nil
	})
	if outcome != election.OnceRan || err != nil {
		t.Fatalf("Once = %v, %v; want ran, nil", outcome, err)
	}
	e, err := admin.Get(context.Background(), "job")
	if err != nil {
		t.Fatal(err)
	}
	if string(e.Value()) != "done:a" || e.Revision() <= token {
		t.Errorf("after the work the key holds %q at revision %d (token %d); want done:a after the token", e.Value(), e.Revision(), token)
	}

	ran := false
	outcome, err = onceElection(t, kvs[1], "b").Once(context.Background(), 0, func(context.Context) error { ran = true; return nil })
	if outcome != election.OnceDone || err != nil || ran {
		t.Errorf("a second Once within the TTL = %v, %v, ran %v; want done, nil, not run", outcome, err, ran)
	}

	// The mark ages out a TTL after it was written, then the work runs again.
	testenv.Eventually(t, "the done mark to age out", 3*ttl, func() bool {
		_, err := admin.Get(context.Background(), "job")
		return errors.Is(err, jetstream.ErrKeyNotFound)
	})
	outcome, err = onceElection(t, kvs[1], "b").Once(context.Background(), 0, func(context.Context) error { return nil })
	if outcome != election.OnceRan || err != nil {
		t.Errorf("Once after the mark aged out = %v, %v; want ran, nil", outcome, err)
	}
}

// TestAFailedOnceReleasesTheKeyForAnotherToRun: a work that returns an
// error leaves the key released, not marked, and a Once waiting for it runs
// the work at once; with NoRetry, the failed run marks the key done.
func TestAFailedOnceReleasesTheKeyForAnotherToRun(t *testing.T) {
	t.Parallel()
	s, admin := serverWith(t, jetstream.KeyValueConfig{Bucket: "ONCE_FAIL", TTL: ttl, History: 10})
	kvs := handles(t, s.ClientURL(), "ONCE_FAIL", 3)

	failing := make(chan struct{})
	waited := make(chan error, 1)
	go func() {
		<-failing
		ran := false
		outcome, err := onceElection(t, kvs[1], "b").Once(context.Background(), awaitTimeout, func(context.Context) error { ran = true; return nil })
		if outcome != election.OnceRan || err != nil || !ran {
			err = fmt.Errorf("the Once waiting for the failed run = %v, %v, ran %v; want ran, nil", outcome, err, ran)
		}
		waited <- err
	}()
	jobErr := errors.New("the job's own error")
	outcome, err := onceElection(t, kvs[0], "a").Once(context.Background(), 0, func(ctx context.Context) error {
		close(failing)
		return jobErr
	})
	if outcome != election.OnceRan || !errors.Is(err, jobErr) || errors.Is(err, election.ErrDoneUnconfirmed) || errors.Is(err, election.ErrWorkInterrupted) {
		t.Fatalf("a failing Once = %v, %v; want ran, the job's own error alone", outcome, err)
	}
	if err := <-waited; err != nil {
		t.Fatal(err)
	}
	var values []string
	for _, e := range keyHistory(t, admin, "job") {
		values = append(values, string(e.Value()))
	}
	if len(values) < 3 || values[1] != "released:a" || values[len(values)-1] != "done:b" {
		t.Errorf("the key went %q; want a's claim, released:a, then b's claim and done:b", values)
	}

	// NoRetry: once b's mark has aged out, a failed run marks the key.
	testenv.Eventually(t, "b's done mark to age out", 3*ttl, func() bool {
		_, err := admin.Get(context.Background(), "job")
		return errors.Is(err, jetstream.ErrKeyNotFound)
	})
	outcome, err = onceElection(t, kvs[2], "c").Once(context.Background(), 0, func(context.Context) error { return jobErr }, election.NoRetry())
	if outcome != election.OnceRan || !errors.Is(err, jobErr) || errors.Is(err, election.ErrDoneUnconfirmed) {
		t.Fatalf("Once with NoRetry after b's mark aged out = %v, %v; want ran, the job's error", outcome, err)
	}
	if e, err := admin.Get(context.Background(), "job"); err != nil || string(e.Value()) != "done:c" {
		t.Errorf("after a failed run with NoRetry the key holds %v (%v); want done:c", e, err)
	}
}

func TestOnceDoesNotRunWhileAnotherCandidateLeads(t *testing.T) {
	t.Parallel()
	s, _ := serverWithBucket(t, "ONCE_HELD")
	kvs := handles(t, s.ClientURL(), "ONCE_HELD", 3)
	g := startGroup(t, "c", "job", kvs[:1])
	leader := g.awaitWin()

	ran := false
	outcome, err := onceElection(t, kvs[1], "other").Once(context.Background(), 0, func(context.Context) error { ran = true; return nil })
	if outcome != election.OnceOtherLeader || err != nil || ran {
		t.Errorf("Once while %s leads = %v, %v, ran %v; want other leader, nil, not run", leader.name, outcome, err, ran)
	}
	outcome, err = onceElection(t, kvs[2], leader.name).Once(context.Background(), 0, func(context.Context) error { ran = true; return nil })
	if outcome != election.OnceAlreadyLeader || err != nil || ran {
		t.Errorf("Once named as the leader = %v, %v, ran %v; want already leader, nil, not run", outcome, err, ran)
	}
}

func TestOnceWaitsForTheKeyToBeReleased(t *testing.T) {
	t.Parallel()
	s, _ := serverWithBucket(t, "ONCE_WAIT")
	kvs := handles(t, s.ClientURL(), "ONCE_WAIT", 2)
	g := startGroup(t, "c", "job", kvs[:1])
	leader := g.awaitWin()

	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		g.elections[leader.name].Stop()
	}()
	outcome, err := onceElection(t, kvs[1], "waiter").Once(context.Background(), awaitTimeout, func(context.Context) error { return nil })
	<-stopped
	if outcome != election.OnceRan || err != nil {
		t.Errorf("Once waiting for the release = %v, %v; want ran, nil", outcome, err)
	}
}

func TestOnceInterruptedLeavesTheKeyUnmarked(t *testing.T) {
	t.Parallel()
	s, admin := serverWith(t, jetstream.KeyValueConfig{Bucket: "ONCE_LOST", TTL: ttl, History: 10})
	kvs := handles(t, s.ClientURL(), "ONCE_LOST", 1)
	working := make(chan struct{})
	go func() {
		<-working
		if err := admin.Delete(context.Background(), "job"); err != nil {
			t.Error(err)
		}
	}()
	outcome, err := onceElection(t, kvs[0], "a").Once(context.Background(), 0, func(ctx context.Context) error {
		close(working)
		<-ctx.Done()
		return ctx.Err()
	})
	if outcome != election.OnceRan || !errors.Is(err, election.ErrWorkInterrupted) || !errors.Is(err, context.Canceled) {
		t.Errorf("Once whose key was deleted during the work = %v, %v; want ran, ErrWorkInterrupted and context.Canceled", outcome, err)
	}
	for _, e := range keyHistory(t, admin, "job") {
		if isDoneMark(e) {
			t.Errorf("the key was marked done at revision %d though the work was interrupted", e.Revision())
		}
	}
}

func isDoneMark(e jetstream.KeyValueEntry) bool {
	return e.Operation() == jetstream.KeyValuePut && len(e.Value()) > 5 && string(e.Value()[:5]) == "done:"
}

func TestOnceFiredOnTenCandidatesAtOnceRunsOnce(t *testing.T) {
	t.Parallel()
	s, _ := serverWithBucket(t, "ONCE_TEN")
	kvs := handles(t, s.ClientURL(), "ONCE_TEN", 10)
	var runs atomic.Int32
	outcomes := make([]election.OnceOutcome, len(kvs))
	var wg sync.WaitGroup
	var skipped atomic.Int32
	var closeOnce sync.Once
	othersDone := make(chan struct{})
	for i, kv := range kvs {
		e := onceElection(t, kv, fmt.Sprintf("host-%d", i))
		wg.Go(func() {
			var err error
			ran := false
			outcomes[i], err = e.Once(context.Background(), 0, func(context.Context) error {
				ran = true
				runs.Add(1)
				// The job runs until every other host's Once returned.
				select {
				case <-othersDone:
				case <-time.After(awaitTimeout):
				}
				return nil
			})
			if !ran && skipped.Add(1) >= int32(len(kvs)-1) {
				closeOnce.Do(func() { close(othersDone) })
			}
			if err != nil {
				t.Errorf("host-%d: %v", i, err)
			}
		})
	}
	wg.Wait()
	if n := runs.Load(); n != 1 {
		t.Errorf("the work ran %d times; outcomes %v", n, outcomes)
	}
	ran := 0
	for _, o := range outcomes {
		if o == election.OnceRan {
			ran++
		}
	}
	if ran != 1 {
		t.Errorf("%d candidates report ran; outcomes %v", ran, outcomes)
	}
}

func TestOnceRefusesBadInput(t *testing.T) {
	t.Parallel()
	s, _ := serverWithBucket(t, "ONCE_BAD")
	kv := handles(t, s.ClientURL(), "ONCE_BAD", 1)[0]
	if _, err := onceElection(t, kv, "a").Once(context.Background(), -time.Second, func(context.Context) error { return nil }); !errors.Is(err, election.ErrInvalidArgument) {
		t.Errorf("a negative wait: %v, want ErrInvalidArgument", err)
	}
	if _, err := onceElection(t, kv, "a").Once(context.Background(), 0, nil); !errors.Is(err, election.ErrInvalidArgument) {
		t.Errorf("no work: %v, want ErrInvalidArgument", err)
	}
	if _, err := election.NewElection(context.Background(), "done:x", "job", kv); !errors.Is(err, election.ErrInvalidArgument) {
		t.Errorf("a name starting with done: %v, want ErrInvalidArgument", err)
	}
}

// TestOnceWaitsOutAHolderThatStoppedRenewing: a holder that wrote once and
// died leaves its value to age out without a word from the watcher; a Once
// waiting longer than a TTL claims it once it has, and runs.
func TestOnceWaitsOutAHolderThatStoppedRenewing(t *testing.T) {
	t.Parallel()
	s, admin := serverWithBucket(t, "ONCE_GHOST")
	kvs := handles(t, s.ClientURL(), "ONCE_GHOST", 1)
	if _, err := admin.Put(context.Background(), "job", []byte("ghost")); err != nil {
		t.Fatal(err)
	}
	written := time.Now()
	var ranAt time.Time
	outcome, err := onceElection(t, kvs[0], "a").Once(context.Background(), 3*ttl, func(context.Context) error { ranAt = time.Now(); return nil })
	if outcome != election.OnceRan || err != nil {
		t.Fatalf("Once over a holder that stopped renewing = %v, %v; want ran, nil", outcome, err)
	}
	if ranAt.Sub(written) < ttl {
		t.Errorf("the work ran %v after the holder's write, before it can have aged out (TTL %v)", ranAt.Sub(written), ttl)
	}
}

// TestOnceGivesUpWhenItsWaitPasses: while a leader renews, a Once with a
// wait returns OnceOtherLeader once the wait has passed, not before and not
// a renewal later.
func TestOnceGivesUpWhenItsWaitPasses(t *testing.T) {
	t.Parallel()
	s, _ := serverWithBucket(t, "ONCE_GIVE_UP")
	kvs := handles(t, s.ClientURL(), "ONCE_GIVE_UP", 2)
	g := startGroup(t, "c", "job", kvs[:1])
	g.awaitWin()

	wait := ttl / 2
	started := time.Now()
	outcome, err := onceElection(t, kvs[1], "other").Once(context.Background(), wait, func(context.Context) error { return nil })
	took := time.Since(started)
	if outcome != election.OnceOtherLeader || err != nil {
		t.Fatalf("Once while another leads = %v, %v; want other leader, nil", outcome, err)
	}
	if took < wait || took > wait+ttl/4 {
		t.Errorf("Once with a wait of %v gave up after %v; want within %v of the wait", wait, took, ttl/4)
	}
}

// TestOnceFromABucketRunsAgainOnceTheMarkAgedOut fires Once from one Bucket,
// whose watcher outlives each Once, while other keys of the bucket are
// written: the mark ages out with no word to the watcher (the server sends
// none when a key ages out), so the view still shows it, and a Once fired
// past the mark's TTL must claim the key, not answer OnceDone.
func TestOnceFromABucketRunsAgainOnceTheMarkAgedOut(t *testing.T) {
	t.Parallel()
	s, admin := serverWithBucket(t, "ONCE_BUCKET")
	kv := handles(t, s.ClientURL(), "ONCE_BUCKET", 1)[0]
	b, err := election.OpenBucket(context.Background(), kv, election.WithoutSplay(), election.WithLogger(testenv.Logger(t)))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	fire := func() (election.OnceOutcome, error) {
		e, err := b.NewElection("a", "job")
		if err != nil {
			t.Fatal(err)
		}
		defer e.Stop()
		return e.Once(context.Background(), 0, func(context.Context) error { return nil })
	}
	if outcome, err := fire(); outcome != election.OnceRan || err != nil {
		t.Fatalf("the first Once = %v, %v; want ran, nil", outcome, err)
	}
	// Another key's writes keep the bucket's watcher busy.
	busy, stopBusy := context.WithCancel(context.Background())
	var writes sync.WaitGroup
	writes.Go(func() {
		for busy.Err() == nil {
			admin.Put(busy, "other", []byte("x"))
			time.Sleep(50 * time.Millisecond) // a steady trickle of writes, not an event awaited
		}
	})
	defer writes.Wait()
	defer stopBusy()
	testenv.Eventually(t, "the done mark to age out", 3*ttl, func() bool {
		_, err := admin.Get(context.Background(), "job")
		return errors.Is(err, jetstream.ErrKeyNotFound)
	})
	if outcome, err := fire(); outcome != election.OnceRan || err != nil {
		t.Errorf("Once from the bucket after the mark aged out = %v, %v; want ran, nil", outcome, err)
	}
}
