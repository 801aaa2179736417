package integration

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/kvelect/election"
	"github.com/kvelect/election/internal/faultproxy"
	"github.com/kvelect/election/internal/testenv"
	"github.com/nats-io/nats.go/jetstream"
)

// keyTTLBucket is a bucket without a TTL of its own that allows per-key TTLs.
const keyTTLBucket = "KEYTTL"

// keyTTLCandidates opens n connections to the server at url, each through a
// fault proxy, and returns for each its bucket handle and its option
// WithKeyTTL(its JetStream, ttl).
func keyTTLCandidates(t *testing.T, url string, n int, ttl time.Duration) ([]jetstream.KeyValue, []election.Option, []*faultproxy.Proxy) {
	t.Helper()
	var kvs []jetstream.KeyValue
	var opts []election.Option
	var proxies []*faultproxy.Proxy
	for range n {
		p, err := faultproxy.New(url)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(p.Close)
		_, js := testenv.Connect(t, p.URL())
		kv, err := js.KeyValue(context.Background(), keyTTLBucket)
		if err != nil {
			t.Fatal(err)
		}
		kvs, opts, proxies = append(kvs, kv), append(opts, election.WithKeyTTL(js, ttl)), append(proxies, p)
	}
	return kvs, opts, proxies
}

// Two elections with different TTLs share a bucket that has none. Renewals
// keep the key's TTL, and a crashed leader's key expires after its own TTL,
// leaving a marker over which the next winner announces at once, while the
// other election keeps its leader.
func TestElectionsWithTheirOwnTTLsShareABucket(t *testing.T) {
	t.Parallel()
	s := testenv.Server(t)
	_, js := testenv.Connect(t, s.ClientURL())
	testenv.Bucket(t, js, jetstream.KeyValueConfig{Bucket: keyTTLBucket, LimitMarkerTTL: time.Second})
	addr := s.Addr().String()

	shortKVs, shortOpts, proxies := keyTTLCandidates(t, addr, 3, 2*time.Second)
	log := &wins{}
	short := startGroupEach(t, "s", "short", shortKVs, func(i int) []election.Option {
		return []election.Option{shortOpts[i], election.WithLogger(slog.New(log))}
	})
	longKVs, longOpts, _ := keyTTLCandidates(t, addr, 2, 4*time.Second)
	long := startGroupEach(t, "l", "long", longKVs, func(i int) []election.Option { return []election.Option{longOpts[i]} })
	shortLeader, longLeader := short.awaitWin(), long.awaitWin()

	// A renewal keeps the key's own TTL.
	stream, err := js.Stream(context.Background(), "KV_"+keyTTLBucket)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(awaitTimeout)
	for {
		msg, err := stream.GetLastMsgForSubject(context.Background(), "$KV."+keyTTLBucket+".short")
		if err != nil {
			t.Fatal(err)
		}
		if msg.Sequence > shortLeader.token {
			if got := msg.Header.Get("Nats-TTL"); got != "2s" {
				t.Fatalf("renewal at revision %d has Nats-TTL %q, want 2s", msg.Sequence, got)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the short election's leader never renewed")
		}
		time.Sleep(50 * time.Millisecond) // polling: no event for "renewed"
	}

	// The short election's leader crashes.
	for i, p := range proxies {
		if shortLeader.name == fmt.Sprintf("s-%d", i) {
			p.Close()
		}
	}
	lost := short.awaitLoss(shortLeader.name)
	next := short.awaitWin()
	if next.name == shortLeader.name || !next.at.After(lost.at) {
		t.Fatalf("%s announced at %v; the crashed leader %s stood down at %v", next.name, next.at, shortLeader.name, lost.at)
	}
	if win := log.last(next.name); win["after"] != "removal a TTL after the last write" || win["announce_delay"] != "0s" {
		t.Errorf("the winner's claim: %v; want it over the expiry marker, announced at once", win)
	}
	if got := long.leaders(); len(got) != 1 || got[0] != longLeader.name {
		t.Errorf("the long election's leaders are %v, want %s still", got, longLeader.name)
	}
}

func TestKeyTTLNeedsABucketThatAllowsIt(t *testing.T) {
	t.Parallel()
	s := testenv.Server(t)
	_, js := testenv.Connect(t, s.ClientURL())
	plain := testenv.Bucket(t, js, jetstream.KeyValueConfig{Bucket: "PLAIN", TTL: 3 * time.Second})
	marked := testenv.Bucket(t, js, jetstream.KeyValueConfig{Bucket: "MARKED3", TTL: 3 * time.Second, LimitMarkerTTL: time.Second})
	forever := testenv.Bucket(t, js, jetstream.KeyValueConfig{Bucket: "FOREVER", LimitMarkerTTL: time.Second})

	for _, tt := range []struct {
		name string
		kv   jetstream.KeyValue
		opts []election.Option
		want error
	}{
		{"bucket without per-message TTLs", plain, []election.Option{election.WithKeyTTL(js, 2*time.Second)}, election.ErrBucketConfig},
		{"fractions of a second", marked, []election.Option{election.WithKeyTTL(js, 2500*time.Millisecond)}, election.ErrInvalidTTL},
		{"longer than the bucket's TTL", marked, []election.Option{election.WithKeyTTL(js, 4*time.Second)}, election.ErrInvalidTTL},
		{"below the minimum TTL", forever, []election.Option{election.WithKeyTTL(js, time.Second)}, election.ErrInvalidTTL},
		{"no JetStream to publish with", forever, []election.Option{election.WithKeyTTL(nil, 2*time.Second)}, election.ErrNilBucket},
		{"no TTL at all", forever, nil, election.ErrBucketNoTTL},
	} {
		if _, err := election.NewElection("m", "k", tt.kv, tt.opts...); !errors.Is(err, tt.want) {
			t.Errorf("%s: %v, want %v", tt.name, err, tt.want)
		}
	}
	if _, err := election.NewElection("m", "k", marked, election.WithKeyTTL(js, 2*time.Second)); err != nil {
		t.Errorf("a 2 s key TTL in a 3 s bucket: %v", err)
	}
}
