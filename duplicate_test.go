package election_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kvelect/election"
	"github.com/kvelect/election/internal/faultproxy"
	"github.com/kvelect/election/internal/testenv"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// dupTTL is the TTL of the buckets of the duplicate-name tests: the
// smallest allowed, so that records age out fast.
const dupTTL = 2 * time.Second

// awaitTimeout guards against a hang; it is not a speed requirement.
const awaitTimeout = 60 * time.Second

// namedConn connects to url under the connection name given, reconnecting
// quickly, and binds the bucket.
func namedConn(t *testing.T, url, name, bucket string) (*nats.Conn, jetstream.KeyValue) {
	t.Helper()
	nc, err := nats.Connect(url, nats.Name(name), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(context.Background(), bucket)
	if err != nil {
		t.Fatal(err)
	}
	return nc, kv
}

// proxiedBucket makes a bucket named name with ttl on a server of its own,
// and a fault proxy to that server for the test's candidates to connect
// through (namedConn on p.URL()).
func proxiedBucket(t *testing.T, name string, ttl time.Duration) (jetstream.KeyValue, *faultproxy.Proxy) {
	t.Helper()
	s := testenv.Server(t)
	_, js := testenv.Connect(t, s.ClientURL())
	admin := testenv.Bucket(t, js, jetstream.KeyValueConfig{Bucket: name, TTL: ttl})
	p, err := faultproxy.New(s.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return admin, p
}

// recordOf reads the candidate record of name for key from the bucket
// itself: its writer and revision, or false if there is none.
func recordOf(t *testing.T, kv jetstream.KeyValue, key, name string) (election.Writer, uint64, bool) {
	t.Helper()
	e, err := kv.Get(context.Background(), "_kvelect.candidate."+key+"."+base64.RawURLEncoding.EncodeToString([]byte(name)))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return election.Writer{}, 0, false
	}
	if err != nil {
		t.Fatal(err)
	}
	var r struct{ Writer election.Writer }
	if err := json.Unmarshal(e.Value(), &r); err != nil {
		t.Fatalf("record %q: %v", e.Value(), err)
	}
	return r.Writer, e.Revision(), true
}

// dupCandidate is an election of the duplicate-name tests, started.
type dupCandidate struct {
	e      *election.Election
	won    chan struct{} // closed when it first leads
	events chan election.EventKind
	ended  chan error // receives what Start returned
}

// startCandidate starts an election of name for key "job" on kv, naming
// nc in its record; it is stopped when the test ends.
func startCandidate(t *testing.T, nc *nats.Conn, kv jetstream.KeyValue, name string, log *slog.Logger, opts ...election.Option) *dupCandidate {
	t.Helper()
	c := &dupCandidate{won: make(chan struct{}), events: make(chan election.EventKind, 100), ended: make(chan error, 1)}
	var once sync.Once
	e, err := election.NewElection(context.Background(), name, "job", kv, append([]election.Option{
		election.WithConnection(nc),
		election.WithLogger(log),
		election.WithoutSplay(),
		election.OnWon(func() { once.Do(func() { close(c.won) }) }),
		election.WithEventHook(func(ev election.Event) {
			select {
			case c.events <- ev.Kind:
			default:
			}
		}),
	}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	c.e = e
	t.Cleanup(e.Stop)
	go func() { c.ended <- e.Start(context.Background()) }()
	return c
}

// awaitWon waits until c leads.
func (c *dupCandidate) awaitWon(t *testing.T, what string) {
	t.Helper()
	select {
	case <-c.won:
	case err := <-c.ended:
		t.Fatalf("%s: Start returned %v before it led", what, err)
	case <-time.After(awaitTimeout):
		t.Fatalf("%s: not leading after %v", what, awaitTimeout)
	}
}

// awaitEnded waits until c's Start returns, and returns its error.
func (c *dupCandidate) awaitEnded(t *testing.T, what string) error {
	t.Helper()
	select {
	case err := <-c.ended:
		return err
	case <-time.After(awaitTimeout):
		t.Fatalf("%s: Start still runs after %v", what, awaitTimeout)
		return nil
	}
}

// TestASecondLiveCandidateOfANameIsRefused starts a candidate under the
// name of a live leader, in another connection: its Start returns a
// *DuplicateError naming the key, the name and both connections within a
// TTL, without campaigning, and the leader and its record are untouched,
// before and after the refused one's Stop.
func TestASecondLiveCandidateOfANameIsRefused(t *testing.T) {
	t.Parallel()
	s := testenv.Server(t)
	_, js := testenv.Connect(t, s.ClientURL())
	testenv.Bucket(t, js, jetstream.KeyValueConfig{Bucket: "DUPLIVE", TTL: dupTTL})
	ncA, kvA := namedConn(t, s.ClientURL(), "first web", "DUPLIVE")
	ncB, kvB := namedConn(t, s.ClientURL(), "second web", "DUPLIVE")
	log := testenv.Logger(t)

	a := startCandidate(t, ncA, kvA, "web", log.With("run", "first"))
	a.awaitWon(t, "the first web")
	first, _, ok := recordOf(t, kvA, "job", "web")
	if !ok || first.Connection != "first web" {
		t.Fatalf("the leader's record names %+v (found %v), want the connection \"first web\"", first, ok)
	}

	began := time.Now()
	b := startCandidate(t, ncB, kvB, "web", log.With("run", "second"))
	err := b.awaitEnded(t, "the second web")
	took := time.Since(began)

	var dup *election.DuplicateError
	if !errors.Is(err, election.ErrDuplicateName) || !errors.As(err, &dup) {
		t.Fatalf("the second web's Start returned %v, want a *DuplicateError", err)
	}
	clientB, _ := ncB.GetClientID()
	switch {
	case dup.Key != "job" || dup.Name != "web":
		t.Errorf("the error is about key %q, name %q; want job, web", dup.Key, dup.Name)
	case dup.Running.Instance != first.Instance || dup.Running.Connection != "first web":
		t.Errorf("the error names %+v as running, want the leader %+v", dup.Running, first)
	case dup.Refused.Connection != "second web" || dup.Refused.Client != clientB || dup.Refused.Instance == first.Instance || dup.Refused.PID == 0 || dup.Refused.Host == "":
		t.Errorf("the error names %+v as refused, want the second connection (client %d) with its host and pid", dup.Refused, clientB)
	}
	for _, says := range []string{`key "job"`, `candidate "web"`, `connection "first web"`, `connection "second web"`, dup.Running.String(), dup.Refused.String()} {
		if !strings.Contains(err.Error(), says) {
			t.Errorf("the error %q does not say %q", err, says)
		}
	}
	// The leader rewrites its record every third of a TTL: the refusal
	// comes with its second rewrite after the second found the record,
	// within two thirds of a TTL.
	if took > dupTTL {
		t.Errorf("refused after %v, want within a TTL (%v)", took, dupTTL)
	}
	select {
	case <-b.won:
		t.Error("the refused web led")
	default:
	}
	if len(b.events) != 0 {
		t.Errorf("the refused web emitted %d events, want none: it never campaigned", len(b.events))
	}

	b.e.Stop()
	if w, _, ok := recordOf(t, kvA, "job", "web"); !ok || w.Instance != first.Instance {
		t.Errorf("after the refused web stopped, the record is %+v (found %v), want the leader's", w, ok)
	}
	if !a.e.IsLeader() {
		t.Error("the first web no longer leads")
	}
	select {
	case err := <-a.ended:
		t.Errorf("the first web's Start returned %v while it ran", err)
	default:
	}
}

// TestACandidateRestartedAfterACrashIsNotRefused abandons a leader without
// Stop (its connection closed, so nothing of it reaches the bucket again,
// as after SIGKILL) and starts a candidate of its name: it waits for the
// old record to age out, says so, and leads within a TTL and a third of
// its start (plus what the old key takes to age out), never refused.
func TestACandidateRestartedAfterACrashIsNotRefused(t *testing.T) {
	t.Parallel()
	s := testenv.Server(t)
	_, js := testenv.Connect(t, s.ClientURL())
	testenv.Bucket(t, js, jetstream.KeyValueConfig{Bucket: "DUPCRASH", TTL: dupTTL})
	ncA, kvA := namedConn(t, s.ClientURL(), "crashed web", "DUPCRASH")
	ncB, kvB := namedConn(t, s.ClientURL(), "restarted web", "DUPCRASH")

	a := startCandidate(t, ncA, kvA, "web", testenv.Logger(t).With("run", "crashed"))
	a.awaitWon(t, "the first web")
	old, _, ok := recordOf(t, kvB, "job", "web")
	if !ok {
		t.Fatal("the leader has no record")
	}
	ncA.Close() // the crash: the old run writes nothing more, and deletes nothing

	logs := &lockedBuffer{}
	log := slog.New(slog.NewTextHandler(logs, nil)).With("run", "restarted")
	began := time.Now()
	b := startCandidate(t, ncB, kvB, "web", log)
	b.awaitWon(t, "the restarted web")
	took := time.Since(began)

	// The old record ages out at most a TTL after it was found, the old
	// key a TTL after the last renewal: both before nameWait (4/3 TTL);
	// the rest is slack for a loaded machine.
	if bound := dupTTL + dupTTL/3 + dupTTL/2; took > bound {
		t.Errorf("the restarted web led %v after it started, want within %v", took, bound)
	}
	if w, _, ok := recordOf(t, kvB, "job", "web"); !ok || w.Connection != "restarted web" || w.Instance == old.Instance {
		t.Errorf("the record names %+v (found %v), want the restarted web's", w, ok)
	}
	if !strings.Contains(logs.String(), "waiting for it to age out") || !strings.Contains(logs.String(), "instance "+old.Instance) {
		t.Errorf("the restarted web did not say what it waited for:\n%s", logs.String())
	}
	select {
	case err := <-b.ended:
		t.Errorf("the restarted web's Start returned %v", err)
	default:
	}
}

// TestACandidateRestartedAfterAStopDoesNotWait stops a candidate and
// starts another of its name at once: the record is gone (a delete marker
// is left), so the new one writes its own and leads without waiting for
// anything to age out.
func TestACandidateRestartedAfterAStopDoesNotWait(t *testing.T) {
	t.Parallel()
	s := testenv.Server(t)
	_, js := testenv.Connect(t, s.ClientURL())
	testenv.Bucket(t, js, jetstream.KeyValueConfig{Bucket: "DUPSTOPPED", TTL: dupTTL})
	ncA, kvA := namedConn(t, s.ClientURL(), "stopped web", "DUPSTOPPED")
	ncB, kvB := namedConn(t, s.ClientURL(), "next web", "DUPSTOPPED")
	log := testenv.Logger(t)
	a := startCandidate(t, ncA, kvA, "web", log.With("run", "stopped"))
	a.awaitWon(t, "the first web")
	a.e.Stop()
	if err := a.awaitEnded(t, "the first web"); err != nil {
		t.Fatalf("the first web's Start returned %v", err)
	}

	began := time.Now()
	b := startCandidate(t, ncB, kvB, "web", log.With("run", "next"))
	b.awaitWon(t, "the next web")
	// Waiting for a record to age out would take most of a TTL.
	if took := time.Since(began); took > dupTTL/2 {
		t.Errorf("the next web led %v after it started, want within %v", took, dupTTL/2)
	}
	if w, _, ok := recordOf(t, kvB, "job", "web"); !ok || w.Connection != "next web" {
		t.Errorf("the record names %+v (found %v), want the next web", w, ok)
	}
}

// TestStopLeavesARecordAnotherRunWrote writes another run's record over a
// candidate's (as a second run of its name from a kvelect that writes
// records blindly would) while the candidate hears nothing from the server
// (its connection half open: what it sends arrives), then stops the
// candidate: its delete, made over its own revision, leaves the other
// record as it is.
func TestStopLeavesARecordAnotherRunWrote(t *testing.T) {
	t.Parallel()
	s := testenv.Server(t)
	_, js := testenv.Connect(t, s.ClientURL())
	// The record outlives the unanswered delete (5 s); a standby
	// (priority 0) has no key to release before it.
	admin := testenv.Bucket(t, js, jetstream.KeyValueConfig{Bucket: "DUPSTOP", TTL: 10 * time.Second})
	p, err := faultproxy.New(s.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	nc, kv := namedConn(t, p.URL(), "web", "DUPSTOP")
	a := startCandidate(t, nc, kv, "web", testenv.Logger(t), election.WithPriority(0))
	testenv.Eventually(t, "the standby's record", awaitTimeout, func() bool {
		w, _, ok := recordOf(t, admin, "job", "web")
		return ok && w.Connection == "web"
	})

	p.HalfOpen() // the candidate does not see the other write: it stops as if it had not happened
	other := []byte(`{"name":"web","priority":1,"since":"2026-01-01T00:00:00Z","writer":{"instance":"0123456789ab","host":"elsewhere","pid":7}}`)
	key := "_kvelect.candidate.job." + base64.RawURLEncoding.EncodeToString([]byte("web"))
	if _, err := admin.Put(context.Background(), key, other); err != nil {
		t.Fatal(err)
	}
	a.e.Stop()
	e, err := admin.Get(context.Background(), key)
	if err != nil || !bytes.Equal(e.Value(), other) {
		t.Errorf("after Stop, the record is %v (%v), want the other run's %s", e, err, other)
	}
}

// TestACandidateWhoseNameWasTakenWhileCutOffStops cuts a leader off for
// long enough that its record ages out, starts another candidate of its
// name, which takes the record and the key, then heals the cut: the first
// finds the record another live run's, stops with a *DuplicateError
// naming that run, and leaves its record and its leadership alone.
func TestACandidateWhoseNameWasTakenWhileCutOffStops(t *testing.T) {
	t.Parallel()
	s := testenv.Server(t)
	_, js := testenv.Connect(t, s.ClientURL())
	testenv.Bucket(t, js, jetstream.KeyValueConfig{Bucket: "DUPCUT", TTL: dupTTL})
	p, err := faultproxy.New(s.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	ncA, kvA := namedConn(t, p.URL(), "cut web", "DUPCUT")
	ncB, kvB := namedConn(t, s.ClientURL(), "new web", "DUPCUT")
	log := testenv.Logger(t)

	a := startCandidate(t, ncA, kvA, "web", log.With("run", "cut"))
	a.awaitWon(t, "the first web")
	p.Refuse()
	b := startCandidate(t, ncB, kvB, "web", log.With("run", "new"))
	b.awaitWon(t, "the second web, once the first's record and key aged out")
	p.Heal()

	err = a.awaitEnded(t, "the first web, healed")
	var dup *election.DuplicateError
	if !errors.As(err, &dup) || dup.Running.Connection != "new web" || dup.Refused.Connection != "cut web" {
		t.Fatalf("the first web's Start returned %v, want a *DuplicateError naming the new web as running", err)
	}
	if w, _, ok := recordOf(t, kvB, "job", "web"); !ok || w.Connection != "new web" {
		t.Errorf("after the first web stopped, the record names %+v (found %v), want the new web", w, ok)
	}
	if !b.e.IsLeader() {
		t.Error("the new web no longer leads")
	}
}

// lockedBuffer is a bytes.Buffer safe for a logger and a test to share.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// TestARecordLongAgedOutDoesNotHoldBackANewRun leaves a record of another
// run in a Bucket's watcher after it aged out on the server (a key that
// ages out leaves no trace the watcher delivers), as a fleet node's daemon
// election that stopped while cut off leaves one, then starts an election
// of that name from the Bucket: the record was delivered long ago, so it
// has aged out, and the election writes its own and leads at once instead
// of waiting a TTL from the moment it found the record. A fleet starts such
// an election anew each time it may claim the daemon, and stops it when
// another node takes the daemon a TTL later: waiting a TTL from each start,
// the node never claimed it.
func TestARecordLongAgedOutDoesNotHoldBackANewRun(t *testing.T) {
	t.Parallel()
	s := testenv.Server(t)
	_, js := testenv.Connect(t, s.ClientURL())
	admin := testenv.Bucket(t, js, jetstream.KeyValueConfig{Bucket: "DUPAGED", TTL: dupTTL})
	b, err := election.OpenBucket(context.Background(), admin, election.WithoutSplay())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	gone := []byte(`{"name":"web","priority":1,"since":"2026-01-01T00:00:00Z","writer":{"instance":"0123456789ab","host":"elsewhere","pid":7}}`)
	key := "_kvelect.candidate.job." + base64.RawURLEncoding.EncodeToString([]byte("web"))
	if _, err := admin.Put(context.Background(), key, gone); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, "the watcher shows the record", awaitTimeout, func() bool {
		cs, err := b.Candidates(context.Background(), "job")
		return err == nil && len(cs) == 1
	})
	testenv.Eventually(t, "the record aged out on the server", awaitTimeout, func() bool {
		_, err := admin.Get(context.Background(), key)
		return errors.Is(err, jetstream.ErrKeyNotFound)
	})

	won := make(chan struct{})
	var once sync.Once
	e, err := b.NewElection("web", "job", election.WithLogger(testenv.Logger(t)),
		election.OnWon(func() { once.Do(func() { close(won) }) }))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Stop)
	began := time.Now()
	go e.Start(context.Background())
	select {
	case <-won:
	case <-time.After(awaitTimeout):
		t.Fatalf("not leading after %v", awaitTimeout)
	}
	// Waiting for the record found at the start to age out takes a TTL.
	if took := time.Since(began); took > dupTTL/2 {
		t.Errorf("led %v after it started, want within %v: it waited for a record that had long aged out", took, dupTTL/2)
	}
}
