package fence_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kvelect/election/fence"
	"github.com/kvelect/election/internal/testenv"
	"github.com/nats-io/nats.go/jetstream"
)

// kvFence returns a KV fence on a fresh bucket of its own server, and the
// bucket (with the most history a bucket keeps, for the tests to read).
func kvFence(t *testing.T) (*fence.KV, jetstream.KeyValue) {
	t.Helper()
	_, js := testenv.Connect(t, testenv.Server(t).ClientURL())
	kv := testenv.Bucket(t, js, jetstream.KeyValueConfig{Bucket: "RESOURCES", History: 64})
	f, err := fence.NewKV(context.Background(), kv)
	if err != nil {
		t.Fatal(err)
	}
	return f, kv
}

func TestKVAcceptsEqualAndHigherTokensAndRefusesLower(t *testing.T) {
	ctx := context.Background()
	f, kv := kvFence(t)
	for _, w := range []struct {
		token uint64
		data  string
		stale bool
	}{{5, "a", false}, {5, "b", false}, {9, "c", false}, {5, "d", true}, {8, "e", true}, {9, "f", false}} {
		_, err := f.Put(ctx, "r", w.token, []byte(w.data))
		if w.stale {
			checkStale(t, err, "r", w.token, 9)
		} else if err != nil {
			t.Fatalf("Put with token %d: %v", w.token, err)
		}
	}
	e, err := kv.Get(ctx, "r")
	if err != nil {
		t.Fatal(err)
	}
	if got := string(e.Value()); got != "Fencing-Token: 9\nf" {
		t.Fatalf("the stored value is %q, want the documented envelope around the last write", got)
	}
}

func TestKVRefusesBadInput(t *testing.T) {
	ctx := context.Background()
	f, kv := kvFence(t)
	for _, c := range []struct {
		resource string
		token    uint64
		want     string
	}{
		{"", 1, "empty resource"},
		{"r", 0, "fencing token 0"},
		{"a b", 1, `resource "a b" is not a valid KV key`},
		{"a*", 1, `resource "a*" is not a valid KV key`},
		{".a", 1, "not starting or ending with a dot"},
	} {
		_, err := f.Put(ctx, c.resource, c.token, nil)
		if !errors.Is(err, fence.ErrInvalidArgument) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Put(%q, %d): %v, want ErrInvalidArgument saying %q", c.resource, c.token, err, c.want)
		}
	}
	// A value written around the fence is not taken for any token.
	if _, err := kv.Put(ctx, "plain", []byte("42")); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Put(ctx, "plain", 7, nil); !errors.Is(err, fence.ErrNotFenced) {
		t.Errorf("Put over an unfenced value: %v, want ErrNotFenced", err)
	}
	if _, err := fence.NewKV(ctx, nil); !errors.Is(err, fence.ErrInvalidArgument) {
		t.Errorf("NewKV(nil): %v, want ErrInvalidArgument", err)
	}
	_, js := testenv.Connect(t, testenv.Server(t).ClientURL())
	ageing := testenv.Bucket(t, js, jetstream.KeyValueConfig{Bucket: "AGEING", TTL: time.Hour})
	if _, err := fence.NewKV(ctx, ageing); !errors.Is(err, fence.ErrInvalidArgument) || !strings.Contains(err.Error(), "TTL") {
		t.Errorf("NewKV on a bucket with a TTL: %v, want ErrInvalidArgument naming the TTL", err)
	}
}

// A key deleted around the fence holds no token any more: any is accepted,
// as the package documents.
func TestKVAcceptsAnyTokenOverADeletedKey(t *testing.T) {
	ctx := context.Background()
	f, kv := kvFence(t)
	if _, err := f.Put(ctx, "r", 9, nil); err != nil {
		t.Fatal(err)
	}
	if err := kv.Delete(ctx, "r"); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Put(ctx, "r", 3, nil); err != nil {
		t.Fatalf("Put over a deleted key: %v", err)
	}
}

// write is one fenced write of the concurrency tests: its token, and what
// the fence answered.
type write struct {
	token uint64
	rev   uint64 // the revision or sequence written; 0 if refused
	err   error
}

// concurrently runs writers goroutines each making perWriter writes with
// random tokens from 1 to 20 through put, and returns every write.
func concurrently(writers, perWriter int, put func(token uint64) (uint64, error)) []write {
	var mu sync.Mutex
	var all []write
	var wg sync.WaitGroup
	for range writers {
		wg.Go(func() {
			for range perWriter {
				token := rand.Uint64N(20) + 1
				rev, err := put(token)
				mu.Lock()
				all = append(all, write{token, rev, err})
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return all
}

// checkHistory checks the writes of concurrently against the resource's
// stored history (token by revision, in order): the tokens never decrease,
// every accepted write is in it with its token, and every refused write was
// refused for a higher token that the history holds.
func checkHistory(t *testing.T, writes []write, revs []uint64, tokens map[uint64]uint64) {
	t.Helper()
	highest := uint64(0)
	for _, rev := range revs {
		if tokens[rev] < highest {
			t.Errorf("revision %d holds token %d after token %d", rev, tokens[rev], highest)
		}
		highest = max(highest, tokens[rev])
	}
	accepted := 0
	for _, w := range writes {
		var stale *fence.StaleError
		switch {
		case w.err == nil:
			accepted++
			if tokens[w.rev] != w.token {
				t.Errorf("a write with token %d was accepted as revision %d, which holds token %d", w.token, w.rev, tokens[w.rev])
			}
		case errors.As(w.err, &stale):
			if stale.Highest <= w.token || stale.Highest > highest {
				t.Errorf("a write with token %d was refused for token %d (the history's highest: %d)", w.token, stale.Highest, highest)
			}
		default:
			t.Errorf("a write with token %d failed: %v", w.token, w.err)
		}
	}
	if accepted != len(revs) {
		t.Errorf("%d writes were accepted, but the history holds %d", accepted, len(revs))
	}
	if accepted == 0 || accepted == len(writes) {
		t.Errorf("%d of %d writes accepted: the test needs both outcomes", accepted, len(writes))
	}
}

func TestKVConcurrentWritersNeverStoreADecreasingToken(t *testing.T) {
	ctx := context.Background()
	f, kv := kvFence(t)
	// 64 writes at most, the most history a bucket keeps: all of it is read.
	writes := concurrently(8, 8, func(token uint64) (uint64, error) {
		return f.Put(ctx, "counter", token, fmt.Appendf(nil, "%d", token))
	})
	entries, err := kv.History(ctx, "counter")
	if err != nil {
		t.Fatal(err)
	}
	var revs []uint64
	tokens := map[uint64]uint64{}
	for _, e := range entries {
		token, data, err := fence.DecodeValue(e.Value())
		if err != nil || string(data) != fmt.Sprint(token) {
			t.Fatalf("revision %d: %q (%v)", e.Revision(), e.Value(), err)
		}
		revs = append(revs, e.Revision())
		tokens[e.Revision()] = token
	}
	checkHistory(t, writes, revs, tokens)
}
