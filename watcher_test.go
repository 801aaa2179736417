package election

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/kvelect/election/internal/testenv"
	"github.com/nats-io/nats.go/jetstream"
)

// watcherFixture runs a watcher on key "k" of a fresh bucket with a 2 s TTL.
type watcherFixture struct {
	t       *testing.T
	js      jetstream.JetStream
	kv      jetstream.KeyValue
	watcher *watcher
	sub     *subscription
}

func startWatcher(t *testing.T) *watcherFixture {
	t.Helper()
	s := testenv.Server(t)
	_, js := testenv.Connect(t, s.ClientURL())
	kv := testenv.Bucket(t, js, jetstream.KeyValueConfig{Bucket: "HUB", TTL: 2 * time.Second, Storage: jetstream.MemoryStorage})
	h := newWatcher(kv, []string{"k"}, 2*time.Second, machineClock{}, slog.New(slog.DiscardHandler))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); h.run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	f := &watcherFixture{t: t, js: js, kv: kv, watcher: h, sub: h.subscribe("k")}
	t.Cleanup(func() { h.unsubscribe(f.sub) })
	return f
}

// put writes value to k and waits until the watcher shows it.
func (f *watcherFixture) put(value string) uint64 {
	f.t.Helper()
	rev, err := f.kv.Put(context.Background(), "k", []byte(value))
	if err != nil {
		f.t.Fatal(err)
	}
	f.await("revision "+value, func(v keyView) bool { return v.latest != nil && v.latest.Revision() >= rev })
	return rev
}

// await waits until the watcher's view of k satisfies ok.
func (f *watcherFixture) await(what string, ok func(keyView) bool) {
	f.t.Helper()
	timeout := time.After(30 * time.Second)
	for !ok(f.watcher.view("k")) {
		select {
		case <-f.sub.changed:
		case <-timeout:
			f.t.Fatalf("the watcher never showed %s", what)
		}
	}
}

// stall deletes the watcher's consumer on the server: its KV watcher gets nothing
// more, as when its server dies, and would recover by itself only after the
// ordered consumer's heartbeat check (about 10 s).
func (f *watcherFixture) stall() {
	f.t.Helper()
	f.stallStream("KV_HUB")
}

// stallStream deletes the one consumer on the stream, the watcher's.
func (f *watcherFixture) stallStream(name string) {
	f.t.Helper()
	ctx := context.Background()
	stream, err := f.js.Stream(ctx, name)
	if err != nil {
		f.t.Fatal(err)
	}
	names := stream.ConsumerNames(ctx)
	deleted := 0
	for name := range names.Name() {
		if err := stream.DeleteConsumer(ctx, name); err != nil {
			f.t.Fatal(err)
		}
		deleted++
	}
	if names.Err() != nil || deleted != 1 {
		f.t.Fatalf("deleted %d consumers (%v), want the watcher's one", deleted, names.Err())
	}
}

func (f *watcherFixture) replaced() (int, string) {
	f.watcher.mu.Lock()
	defer f.watcher.mu.Unlock()
	return f.watcher.replaced, f.watcher.reason
}

func TestWatcherReplacesAKVWatcherThatMissesThisProcesssWrite(t *testing.T) {
	t.Parallel()
	f := startWatcher(t)
	f.put("released:x") // not held: the silence rule does not apply
	f.stall()
	rev, err := f.kv.Put(context.Background(), "k", []byte("released:y"))
	if err != nil {
		t.Fatal(err)
	}
	f.watcher.wrote(rev)
	f.await("the write after the stall", func(v keyView) bool { return v.latest != nil && v.latest.Revision() == rev })
	if n, reason := f.replaced(); n != 1 || reason != "a write of this process was not delivered" {
		t.Errorf("replaced %d watchers, last because %q; want 1, for the missing write", n, reason)
	}
}

func TestWatcherReplacesAKVWatcherSilentWhileAKeyIsHeld(t *testing.T) {
	t.Parallel()
	f := startWatcher(t)
	f.put("holder")
	f.stall()
	// Polled: the watcher has no event for this.
	testenv.Eventually(t, "the watcher to replace its silent KV watcher", 30*time.Second, func() bool {
		n, _ := f.replaced()
		return n > 0
	})
	if _, reason := f.replaced(); reason != "a key is held but the bucket was silent" {
		t.Errorf("replaced because %q, want the silence", reason)
	}
	f.put("holder") // the new watcher delivers
}

func TestWatcherShowsAKeyThatAgedOutWhileItsKVWatcherStalled(t *testing.T) {
	t.Parallel()
	f := startWatcher(t)
	f.put("holder")
	f.stall()
	// Without expiry markers the key vanishes silently; only a new
	// watcher's initial state shows it gone.
	f.await("the key gone", func(v keyView) bool { return v.ready && v.latest == nil })
	if n, _ := f.replaced(); n == 0 {
		t.Error("the watcher showed the key gone without replacing its KV watcher")
	}
}

func TestWatcherReplacesAKVWatcherThatFallsBehindWhileThisProcessKeepsWriting(t *testing.T) {
	t.Parallel()
	f := startWatcher(t)
	f.put("released:x") // not held: the silence rule does not apply
	f.stall()
	// Writes every 200 ms, none delivered: the watcher owes them for more
	// than a second however often this process writes.
	deadline := time.Now().Add(30 * time.Second)
	for n, _ := f.replaced(); n == 0; n, _ = f.replaced() {
		if time.Now().After(deadline) {
			t.Fatal("the watcher never replaced a KV watcher that delivered none of this process's writes")
		}
		rev, err := f.kv.Put(context.Background(), "k", []byte("released:y"))
		if err != nil {
			t.Fatal(err)
		}
		f.watcher.wrote(rev)
		time.Sleep(200 * time.Millisecond) // the pace of this process's writes
	}
	if _, reason := f.replaced(); reason != "a write of this process was not delivered" {
		t.Errorf("replaced because %q, want the owed writes", reason)
	}
}

func TestObserveCarriesOnAcrossAStalledWatcher(t *testing.T) {
	t.Parallel()
	s := testenv.Server(t)
	_, js := testenv.Connect(t, s.ClientURL())
	kv := testenv.Bucket(t, js, jetstream.KeyValueConfig{Bucket: "OBS", TTL: 2 * time.Second, Storage: jetstream.MemoryStorage})
	b, err := OpenBucket(context.Background(), kv)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	changes, err := b.Observe(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	next := func(want string) {
		t.Helper()
		select {
		case l := <-changes:
			if l.Name != want {
				t.Fatalf("observer got holder %q, want %q", l.Name, want)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("observer got no change, want holder %q", want)
		}
	}
	next("")
	if _, err := kv.Put(ctx, "k", []byte("a")); err != nil {
		t.Fatal(err)
	}
	next("a")

	f := &watcherFixture{t: t, js: js, kv: kv, watcher: b.watcher}
	f.stallStream("KV_OBS")
	for _, v := range []string{"released:a", "b"} {
		if _, err := kv.Put(ctx, "k", []byte(v)); err != nil {
			t.Fatal(err)
		}
	}
	// Either nats.go's ordered consumer notices the deletion and resumes
	// where it stopped (the release, then b), or the watcher replaces the
	// watcher once the held key's bucket stays silent, and the new watcher
	// finds b (the release left no trace). Either way b is reported.
	timeout := time.After(30 * time.Second)
	for {
		select {
		case l := <-changes:
			switch l.Name {
			case "b":
				return
			case "":
			default:
				t.Fatalf("observer got holder %q after the stall, want the release then b, or b", l.Name)
			}
		case <-timeout:
			t.Fatal("the observer never reported b after the stall")
		}
	}
}
