package election

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvelect/election/internal/testenv"
	"github.com/nats-io/nats.go/jetstream"
)

// syncBuffer is a log sink the test reads.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// TestAdoptingASameNamedClaimOverARemovalNeverMakesTwoLeaders probes lostRenewal's claim
// that adopting is safe "even if a removal and a claim by another candidate
// of the same name reach the watcher together": leader x (first) has a
// renewal go unanswered while it is cut off and blind; meanwhile the key is
// deleted and a second candidate also named x claims over the removal. When
// x first comes back, its new watcher shows only that claim, a write of its
// own name above its revision, which it takes for its own lost renewal.
// Guarantee 1: IsLeader is never true on both, and the second x never runs
// its OnWon while the first's runs.
func TestAdoptingASameNamedClaimOverARemovalNeverMakesTwoLeaders(t *testing.T) {
	t.Parallel()
	s := testenv.Server(t)
	_, js := testenv.Connect(t, s.ClientURL())
	kv := testenv.Bucket(t, js, jetstream.KeyValueConfig{Bucket: "ADOPT", TTL: 2 * time.Second})
	_, js2 := testenv.Connect(t, s.ClientURL())
	kv2, err := js2.KeyValue(context.Background(), "ADOPT")
	if err != nil {
		t.Fatal(err)
	}
	blind := &cutKV{KeyValue: kv}
	logs := &syncBuffer{}

	var mu sync.Mutex
	running := map[string]bool{}
	onWon := func(who string) func(context.Context) {
		return func(leading context.Context) {
			mu.Lock()
			for other := range running {
				t.Errorf("%s's OnWon started while %s's ran", who, other)
			}
			running[who] = true
			mu.Unlock()
			<-leading.Done()
			mu.Lock()
			delete(running, who)
			mu.Unlock()
		}
	}
	first, err := NewElection(context.Background(), "x", "k", blind, WithoutSplay(), WithoutPresence(),
		WithLogger(slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})).With("who", "first")),
		OnWon(onWon("first")))
	if err != nil {
		t.Fatal(err)
	}
	second, err := NewElection(context.Background(), "x", "k", kv2, WithoutSplay(), WithoutPresence(),
		WithLogger(testenv.Logger(t).With("who", "second")), OnWon(onWon("second")))
	if err != nil {
		t.Fatal(err)
	}
	firstDone, secondDone := make(chan struct{}), make(chan struct{})
	go func() { defer close(firstDone); first.Start(context.Background()) }() //nolint:errcheck // stopped below
	testenv.Eventually(t, "first to lead", 10*time.Second, first.IsLeader)

	// Sample IsLeader on both until the end.
	sampling, stopSampling := context.WithCancel(context.Background())
	sampled := make(chan struct{})
	var both atomic.Int32
	go func() {
		defer close(sampled)
		for sampling.Err() == nil {
			if first.IsLeader() && second.IsLeader() && first.Token() != 0 && second.Token() != 0 {
				both.Add(1)
			}
			time.Sleep(500 * time.Microsecond)
		}
	}()
	defer func() {
		stopSampling()
		<-sampled
		first.Stop()
		second.Stop()
		<-firstDone
		<-secondDone
		if strings.Contains(logs.String(), "holding the key from it") {
			t.Log("the first x adopted the second's claim as its own lost renewal")
		}
		t.Logf("first x's log:\n%s", logs.String())
	}()

	// Right after a renewal of the first: cut it off, delete the key, and
	// let the second claim over the removal.
	e0, err := kv.Get(context.Background(), "k")
	if err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, "a renewal", 5*time.Second, func() bool {
		e, err := kv.Get(context.Background(), "k")
		return err == nil && e.Revision() > e0.Revision()
	})
	blind.cut.Store(true)
	if err := kv.Delete(context.Background(), "k"); err != nil {
		t.Fatal(err)
	}
	go func() { defer close(secondDone); second.Start(context.Background()) }() //nolint:errcheck // stopped below
	testenv.Eventually(t, "the second x to claim over the removal", 5*time.Second, func() bool {
		e, err := kv.Get(context.Background(), "k")
		return err == nil && string(e.Value()) == "x"
	})
	testenv.Eventually(t, "the first x's renewal to go unanswered", 5*time.Second, func() bool { return blind.failed.Load() > 0 })
	blind.cut.Store(false)
	blind.reopen()
	// Past the second's announce delay and a renewal or two.
	time.Sleep(4 * time.Second)
	if n := both.Load(); n > 0 {
		t.Errorf("IsLeader true on both x's at once, in %d samples", n)
	}
	t.Logf("after: first leads %v, second leads %v", first.IsLeader(), second.IsLeader())
}
