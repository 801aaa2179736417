package election

import (
	"context"
	"testing"
	"time"

	"github.com/kvelect/election/internal/testenv"
	"github.com/nats-io/nats.go/jetstream"
)

// TestAStopAfterALostRenewalAnswerReleases stops leader a (an election made
// with NewElection, not from a Bucket, so its watcher is its own) right
// after a renewal applied with its answer lost, before its watcher
// delivered that renewal (a client cut off loses both at once; stallKV
// holds the watcher's delivery back 50 ms): the watcher outlives the
// campaign, the release goes over the renewal once it shows
// (adoptLostRenewal), and b leads at once rather than once the key expired.
func TestAStopAfterALostRenewalAnswerReleases(t *testing.T) {
	t.Parallel()
	s := testenv.Server(t)
	_, js := testenv.Connect(t, s.ClientURL())
	const ttl = 6 * time.Second
	kv := testenv.Bucket(t, js, jetstream.KeyValueConfig{Bucket: "ATTACKSTOPLOST", TTL: ttl})
	stall := newStallKV(kv, "svc")

	aWon := make(chan struct{}, 4)
	a, err := NewElection(context.Background(), "a", "svc", stall, WithoutSplay(),
		WithLogger(testenv.Logger(t).With("who", "a")),
		OnWon(func() { aWon <- struct{}{} }))
	if err != nil {
		t.Fatal(err)
	}
	actx, acancel := context.WithCancel(context.Background())
	defer acancel()
	aDone := make(chan error, 1)
	go func() { aDone <- a.Start(actx) }()
	<-aWon

	bWon := make(chan time.Time, 4)
	bCampaigns := make(chan struct{}, 1)
	b, err := NewElection(context.Background(), "b", "svc", kv, WithoutSplay(),
		WithLogger(testenv.Logger(t).With("who", "b")),
		OnWon(func() { bWon <- time.Now() }),
		WithEventHook(func(ev Event) {
			if ev.Kind == EventCampaigning {
				bCampaigns <- struct{}{}
			}
		}))
	if err != nil {
		t.Fatal(err)
	}
	bDone := make(chan error, 1)
	go func() { bDone <- b.Start(context.Background()) }()
	defer func() { b.Stop(); <-bDone }()
	<-bCampaigns

	var stopped time.Time
	stall.armed <- func() {
		stopped = time.Now()
		acancel()
		time.AfterFunc(50*time.Millisecond, stall.unstall)
	}
	select {
	case <-aDone:
	case <-time.After(2 * ttl):
		t.Fatal("a's Start did not return")
	}
	took := time.Since(stopped)
	t.Logf("a's Start returned %v after its context was cancelled", took.Round(time.Millisecond))
	select {
	case won := <-bWon:
		if d := won.Sub(stopped); d > ttl/4 {
			t.Errorf("b led %v after a was stopped, want at once (a's release)", d.Round(time.Millisecond))
		}
	case <-time.After(ttl / 4):
		e, _ := kv.Get(context.Background(), "svc")
		t.Errorf("b does not lead %v after a was stopped (Start returned after %v): a's release did not land; the key holds %q (revision %d)", ttl/4, took.Round(time.Millisecond), e.Value(), e.Revision())
	}
}
