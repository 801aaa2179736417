package integration

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvelect/election"
	"github.com/kvelect/election/internal/testenv"
	"github.com/nats-io/nats.go/jetstream"
)

// lostAnswerTries is how many Once runs each test below makes, each on a key
// of its own, all at once.
const lostAnswerTries = 20

// lostAnswerInterval is the campaign interval of the host whose renewal's
// answer is lost: short, so that it renews within the first 100 ms of the
// work.
const lostAnswerInterval = 100 * time.Millisecond

// lostAnswerElection makes an election for key named name on kv.
func lostAnswerElection(t *testing.T, kv jetstream.KeyValue, name, key string, opts ...election.Option) *election.Election {
	t.Helper()
	opts = append([]election.Option{election.WithoutSplay(), election.WithLogger(testenv.Logger(t).With("candidate", name, "key", key))}, opts...)
	e, err := election.NewElection(context.Background(), name, key, kv, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// lostAnswerHost is host "a": a store on its own connection that writes its
// first renewal (the second Update of "a") but answers it with a timeout,
// as a busy server or a lossy link does. Its watchers' entries are told to
// seen.
func lostAnswerHost(t *testing.T, url, bucket string, script func(n int, value string) int) (*adversarialKV, *deliveries) {
	t.Helper()
	seen := newDeliveries()
	var updates atomic.Int32
	a := &adversarialKV{
		KeyValue: handles(t, url, bucket, 1)[0],
		rng:      rand.New(rand.NewPCG(0, 0)), // unused: on is false and the script picks the faults
		lost:     make(chan uint64, 4),
		script: func(_ string, value []byte, _ uint64) int {
			n := 0
			if string(value) == "a" {
				n = int(updates.Add(1))
			}
			if n == 2 {
				return 1
			}
			return script(n, string(value))
		},
		delivered: seen.saw,
	}
	return a, seen
}

// deliveries keeps the latest entry a store's watchers delivered.
type deliveries struct {
	mu     sync.Mutex
	latest jetstream.KeyValueEntry
	wake   chan struct{} // closed and replaced on every entry
}

func newDeliveries() *deliveries { return &deliveries{wake: make(chan struct{})} }

func (d *deliveries) saw(e jetstream.KeyValueEntry) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.latest == nil || e.Revision() > d.latest.Revision() {
		d.latest = e
		close(d.wake)
		d.wake = make(chan struct{})
	}
}

// await waits until the latest entry delivered satisfies ok, and reports
// whether it did within awaitTimeout.
func (d *deliveries) await(ok func(jetstream.KeyValueEntry) bool) bool {
	timeout := time.After(awaitTimeout)
	for {
		d.mu.Lock()
		e, wake := d.latest, d.wake
		d.mu.Unlock()
		if e != nil && ok(e) {
			return true
		}
		select {
		case <-wake:
		case <-timeout:
			return false
		}
	}
}

// onceAgain runs host "b"'s Once right after host a's returned at
// returned, and fails the test unless it finds the key marked done.
func onceAgain(t *testing.T, b *election.Election, try int, returned time.Time) {
	ran := false
	outcome, err := b.Once(context.Background(), 0, func(context.Context) error { ran = true; return nil })
	if after := time.Since(returned); outcome != election.OnceDone || err != nil || ran {
		t.Errorf("try %d: b's Once %v after a's = %v, %v, ran %v; want done, nil, not run", try, after.Round(time.Millisecond), outcome, err, ran)
	} else if after >= ttl {
		t.Errorf("try %d: b's Once came %v after a's, past the mark's lifetime (TTL %v): the test proves nothing", try, after, ttl)
	}
}

// TestOnceMarksDoneOverARenewalWhoseAnswerWasLost: the server applies a
// renewal during the work but its answer is lost, so the leader's known
// revision is stale when the work returns. The done mark still lands, over
// the leader's own latest revision, and another host's Once right after
// finds the key done. The work returns as soon as the renewal is applied
// (odd tries: once the leader's watcher delivered it, so that the renewal
// loop meets it first), and on every fourth try the mark's own answer is
// lost too.
func TestOnceMarksDoneOverARenewalWhoseAnswerWasLost(t *testing.T) {
	t.Parallel()
	s, _ := serverWithBucket(t, "ONCE_LOST_ANSWER")
	var wg sync.WaitGroup
	for i := range lostAnswerTries {
		key := fmt.Sprintf("job-%d", i)
		markWrites := 0
		a, seen := lostAnswerHost(t, s.ClientURL(), "ONCE_LOST_ANSWER", func(_ int, value string) int {
			if value == "done:a" && i%4 == 3 {
				if markWrites++; markWrites == 1 {
					return 1
				}
			}
			return 0
		})
		b := lostAnswerElection(t, handles(t, s.ClientURL(), "ONCE_LOST_ANSWER", 1)[0], "b", key)
		e := lostAnswerElection(t, a, "a", key, election.WithUnsafeShortTTL(), election.WithCampaignInterval(lostAnswerInterval))
		wg.Go(func() {
			outcome, err := e.Once(context.Background(), 0, func(ctx context.Context) error {
				select {
				case rev := <-a.lost:
					if i%2 == 1 && !seen.await(func(e jetstream.KeyValueEntry) bool { return e.Revision() >= rev }) {
						return errors.New("the watcher did not deliver the renewal")
					}
					return nil
				case <-ctx.Done():
					return ctx.Err()
				case <-time.After(awaitTimeout):
					return errors.New("no renewal during the work")
				}
			})
			returned := time.Now()
			if outcome != election.OnceRan || err != nil {
				t.Errorf("try %d: a's Once = %v, %v; want ran, nil", i, outcome, err)
				return
			}
			onceAgain(t, b, i, returned)
		})
	}
	wg.Wait()
}

// TestOnceMarksDoneOverAKeyDeletedAsTheWorkFinishes: after a renewal whose
// answer was lost, the leader's next renewal is held back while the work
// returns and another client deletes the key. The renewal then fails over
// the delete and the leader stands down as on any removal, where it would
// vouch; its work complete, it writes the done mark, not a release, over
// the delete. (If the held renewal outlives its own timeout, the leader
// takes the release path instead and finds the delete there.) Another
// host's Once right after finds the key done.
func TestOnceMarksDoneOverAKeyDeletedAsTheWorkFinishes(t *testing.T) {
	t.Parallel()
	s, admin := serverWithBucket(t, "ONCE_LOST_DELETE")
	var wg sync.WaitGroup
	var viaDelete atomic.Int32
	for i := range lostAnswerTries {
		key := fmt.Sprintf("job-%d", i)
		held, unblock := make(chan struct{}), make(chan struct{})
		a, seen := lostAnswerHost(t, s.ClientURL(), "ONCE_LOST_DELETE", func(n int, _ string) int {
			if n == 3 { // the next renewal
				close(held)
				<-unblock
			}
			return 0
		})
		b := lostAnswerElection(t, handles(t, s.ClientURL(), "ONCE_LOST_DELETE", 1)[0], "b", key)
		e := lostAnswerElection(t, a, "a", key, election.WithUnsafeShortTTL(), election.WithCampaignInterval(lostAnswerInterval),
			election.OnLost(func(cause error) {
				if errors.Is(cause, election.ErrRevisionGone) {
					viaDelete.Add(1)
				}
			}))
		wg.Go(func() {
			workEnded := make(chan struct{})
			type result struct {
				outcome election.OnceOutcome
				err     error
			}
			done := make(chan result, 1)
			go func() {
				outcome, err := e.Once(context.Background(), 0, func(ctx context.Context) error {
					select {
					case <-held:
					case <-ctx.Done():
						return ctx.Err()
					case <-time.After(awaitTimeout):
						return errors.New("no renewal during the work")
					}
					// The leadership context ends once Once has seen the
					// work return (the renewal is held back, so nothing else
					// ends it).
					go func() { <-ctx.Done(); close(workEnded) }()
					return nil
				})
				done <- result{outcome, err}
			}()
			select {
			case <-workEnded:
				if err := admin.Delete(context.Background(), key); err != nil {
					t.Error(err)
				}
				if !seen.await(func(e jetstream.KeyValueEntry) bool { return e.Operation() == jetstream.KeyValueDelete }) {
					t.Errorf("try %d: a's watcher did not deliver the delete", i)
				}
			case r := <-done:
				done <- r
			}
			close(unblock)
			r := <-done
			returned := time.Now()
			if r.outcome != election.OnceRan || r.err != nil {
				t.Errorf("try %d: a's Once = %v, %v; want ran, nil", i, r.outcome, r.err)
				return
			}
			onceAgain(t, b, i, returned)
		})
	}
	wg.Wait()
	t.Logf("%d of %d leaders stood down over the delete, the others through the release path", viaDelete.Load(), lostAnswerTries)
}

// TestOnceReportsADoneMarkItCannotConfirm: after a renewal whose answer was
// lost, every write of the done mark is dropped behind a timeout. Once says
// the work ran but the mark is not confirmed, and the key is not marked.
func TestOnceReportsADoneMarkItCannotConfirm(t *testing.T) {
	t.Parallel()
	s, admin := serverWithBucket(t, "ONCE_NO_MARK")
	a, _ := lostAnswerHost(t, s.ClientURL(), "ONCE_NO_MARK", func(_ int, value string) int {
		if value == "done:a" {
			return 2
		}
		return 0
	})
	outcome, err := lostAnswerElection(t, a, "a", "job", election.WithUnsafeShortTTL(), election.WithCampaignInterval(lostAnswerInterval)).
		Once(context.Background(), 0, func(ctx context.Context) error {
			select {
			case <-a.lost:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		})
	if outcome != election.OnceRan || !errors.Is(err, election.ErrDoneUnconfirmed) || errors.Is(err, election.ErrWorkInterrupted) {
		t.Errorf("Once whose done mark cannot be written = %v, %v; want ran, ErrDoneUnconfirmed", outcome, err)
	}
	if e, err := admin.Get(context.Background(), "job"); err == nil && isDoneMark(e) {
		t.Errorf("the key holds %q though every write of the mark was dropped", e.Value())
	}
}
