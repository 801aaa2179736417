package integration

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kvelect/election"
	"github.com/kvelect/election/internal/testenv"
	"github.com/nats-io/nats.go/jetstream"
)

// A store that loses acknowledged writes and then gives their revisions
// out again (JetStream did, in Jepsen's NATS 2.12.1 analysis, after an OS
// crash with lazy fsync) breaks what compare-and-set promises: a leader's
// renewal checked against a revision that now holds a rival's claim
// succeeds. The tests here emulate such a loss on a real server and check
// the two rules that guard against it: a claim given a revision its
// candidate had seen before proves nothing, and a holder that sees its
// revision holding another's write stands down without writing.

// rollbackKV rolls the bucket's stream back once, right after the first
// renewal it forwards is acknowledged: the stream is replaced by an empty
// one whose next revision is to, so that every write from to on is lost
// and to is given out again.
type rollbackKV struct {
	jetstream.KeyValue
	t       *testing.T
	js      jetstream.JetStream
	to      func() uint64
	once    sync.Once
	done    chan struct{}
	claimed chan time.Time // when a claim over no entry was acknowledged, after the rollback
}

func (r *rollbackKV) Update(ctx context.Context, key string, value []byte, last uint64) (uint64, error) {
	rev, err := r.KeyValue.Update(ctx, key, value, last)
	if err == nil && last == 0 {
		select {
		case <-r.done:
			r.claimed <- time.Now()
		default:
		}
	}
	if err == nil && last > 0 {
		r.once.Do(func() {
			defer close(r.done)
			status, err := r.KeyValue.Status(ctx)
			if err != nil {
				r.t.Errorf("rollback: %v", err)
				return
			}
			cfg := status.(*jetstream.KeyValueBucketStatus).StreamInfo().Config
			if err := r.js.DeleteStream(ctx, cfg.Name); err != nil {
				r.t.Errorf("rollback: %v", err)
				return
			}
			cfg.FirstSeq = r.to()
			// The server may still be removing the old stream's files: it
			// then refuses the store (10049) for a moment, which nothing
			// announces, so the creation is retried until it succeeds.
			var apiErr *jetstream.APIError
			deadline := time.Now().Add(5 * time.Second)
			for {
				_, err := r.js.CreateStream(ctx, cfg)
				if err == nil {
					return
				}
				if !errors.As(err, &apiErr) || apiErr.ErrorCode != 10049 || time.Now().After(deadline) {
					r.t.Errorf("rollback: %v", err)
					return
				}
				time.Sleep(10 * time.Millisecond)
			}
		})
	}
	return rev, err
}

// TestRollbackOfAWitnessedClaim runs two candidates; once the leader's
// first renewal is acknowledged, the store loses the leader's claim and that
// renewal and gives the claim's revision out again. Whoever wins that
// revision had seen it before: it must wait the announce delay instead of
// leading at once, by when the old leader has stood down (its next renewal
// fails). The two must never lead at once.
func TestRollbackOfAWitnessedClaim(t *testing.T) {
	s := testenv.Server(t)
	_, js := testenv.Connect(t, s.ClientURL())
	testenv.Bucket(t, js, jetstream.KeyValueConfig{Bucket: "ROLLBACK", TTL: 2 * time.Second})

	g := newGroup(t, "job")
	var claim uint64
	var claimMu sync.Mutex
	kvs := map[string]jetstream.KeyValue{}
	rollbacks := map[string]*rollbackKV{}
	for _, name := range []string{"a", "b"} {
		_, jsN := testenv.Connect(t, s.ClientURL())
		kv, err := jsN.KeyValue(context.Background(), "ROLLBACK")
		if err != nil {
			t.Fatal(err)
		}
		rollbacks[name] = &rollbackKV{KeyValue: kv, t: t, js: js, done: make(chan struct{}), claimed: make(chan time.Time, 4),
			to: func() uint64 { claimMu.Lock(); defer claimMu.Unlock(); return claim }}
		kvs[name] = rollbacks[name]
	}
	g.add("a", kvs["a"], election.WithoutPresence())
	g.add("b", kvs["b"], election.WithoutPresence())
	first := g.awaitWin()
	claimMu.Lock()
	claim = first.token
	claimMu.Unlock()
	// Only the leader renews; its first renewal triggers the rollback.
	other := map[string]string{"a": "b", "b": "a"}[first.name]
	rollbacks[other].once.Do(func() { close(rollbacks[other].done) })
	<-rollbacks[first.name].done

	lost := g.awaitLoss(first.name)
	if !errors.Is(lost.cause, election.ErrRevisionGone) {
		t.Errorf("%s stood down with %v, want ErrRevisionGone", first.name, lost.cause)
	}
	second := g.awaitWin()
	if second.token != first.token {
		t.Errorf("after the rollback %s leads with token %d; want the revision given again, %d", second.name, second.token, first.token)
	}
	claimed := <-rollbacks[second.name].claimed
	if waited := second.at.Sub(claimed); waited < 2*time.Second {
		t.Errorf("%s led %v after its claim over a revision given again: want the announce delay, a TTL (2s)", second.name, waited)
	}
}

// injectingKV hands its elections' watchers entries of the test's making,
// among the server's own.
type injectingKV struct {
	jetstream.KeyValue
	inject chan jetstream.KeyValueEntry
}

func (k *injectingKV) WatchFiltered(ctx context.Context, keys []string, opts ...jetstream.WatchOpt) (jetstream.KeyWatcher, error) {
	w, err := k.KeyValue.WatchFiltered(ctx, keys, opts...)
	if err != nil {
		return nil, err
	}
	iw := &injectingWatcher{KeyWatcher: w, updates: make(chan jetstream.KeyValueEntry), stop: make(chan struct{})}
	go func() {
		defer close(iw.updates)
		for {
			var e jetstream.KeyValueEntry
			var ok bool
			select {
			case e, ok = <-w.Updates():
				if !ok {
					return
				}
			case e = <-k.inject:
			case <-iw.stop:
				return
			}
			select {
			case iw.updates <- e:
			case <-iw.stop:
				return
			}
		}
	}()
	return iw, nil
}

type injectingWatcher struct {
	jetstream.KeyWatcher
	updates  chan jetstream.KeyValueEntry
	stop     chan struct{}
	stopOnce sync.Once
}

func (w *injectingWatcher) Updates() <-chan jetstream.KeyValueEntry { return w.updates }

func (w *injectingWatcher) Stop() error {
	w.stopOnce.Do(func() { close(w.stop) })
	return w.KeyWatcher.Stop()
}

// entry is a watch entry of the test's making.
type entry struct {
	key   string
	value string
	rev   uint64
}

func (e entry) Bucket() string                  { return "ROLLBACK" }
func (e entry) Key() string                     { return e.key }
func (e entry) Value() []byte                   { return []byte(e.value) }
func (e entry) Revision() uint64                { return e.rev }
func (e entry) Created() time.Time              { return time.Now() }
func (e entry) Delta() uint64                   { return 0 }
func (e entry) Operation() jetstream.KeyValueOp { return jetstream.KeyValuePut }

// TestHolderWhoseRevisionHoldsAnotherWriteStandsDown shows the leader's
// watcher another client's write at the leader's own revision, as a store
// that lost the leader's write and gave its revision to a rival's claim
// would: the leader stands down at once, and writes nothing over it.
func TestHolderWhoseRevisionHoldsAnotherWriteStandsDown(t *testing.T) {
	s := testenv.Server(t)
	_, js := testenv.Connect(t, s.ClientURL())
	kv := testenv.Bucket(t, js, jetstream.KeyValueConfig{Bucket: "ROLLBACK", TTL: 2 * time.Second})
	ikv := &injectingKV{KeyValue: kv, inject: make(chan jetstream.KeyValueEntry)}
	g := newGroup(t, "job")
	g.add("a", ikv, election.WithoutPresence())
	won := g.awaitWin()

	latest, err := kv.Get(context.Background(), "job")
	if err != nil {
		t.Fatal(err)
	}
	ikv.inject <- entry{key: "job", value: "rival", rev: latest.Revision()}
	lost := g.awaitLoss("a")
	if !errors.Is(lost.cause, election.ErrRevisionGone) || !strings.Contains(lost.cause.Error(), "holds another client's write") {
		t.Errorf("stood down with %v, want ErrRevisionGone naming another client's write at its revision", lost.cause)
	}
	after, err := kv.Get(context.Background(), "job")
	if err != nil {
		t.Fatal(err)
	}
	if after.Revision() != latest.Revision() {
		t.Errorf("the key moved from revision %d to %d (%q) after the stand-down: the leader wrote over the revision it lost",
			latest.Revision(), after.Revision(), after.Value())
	}
	t.Logf("token %d; stood down %v after the injected entry", won.token, time.Since(lost.at))
}
