// Package leadtest gives tests of code that runs under a leadership (the
// guard, the commands' supervision) a real one: an election on a bucket of
// an embedded server. The root package's own tests cannot import it (it
// imports the root), and keep helpers of their own.
package leadtest

import (
	"context"
	"testing"
	"time"

	"github.com/kvelect/election"
	"github.com/nats-io/nats.go/jetstream"
)

// Lead runs election "a" for key "job" of kv, with opts, and returns the
// context of its first leadership, within timeout, and a function that
// stops the election (it releases the key). The election stops when the
// test ends, if not before.
func Lead(t testing.TB, kv jetstream.KeyValue, timeout time.Duration, opts ...election.Option) (leading context.Context, stop func()) {
	t.Helper()
	won := make(chan context.Context, 1)
	opts = append([]election.Option{election.WithoutSplay(),
		election.OnWon(func(leading context.Context) {
			select {
			case won <- leading:
			default:
			}
			<-leading.Done()
		})}, opts...)
	e, err := election.NewElection(context.Background(), "a", "job", kv, opts...)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- e.Start(context.Background()) }()
	stopped := false
	stop = func() {
		if !stopped {
			stopped = true
			e.Stop()
			<-done
		}
	}
	t.Cleanup(stop)
	select {
	case leading = <-won:
	case <-time.After(timeout):
		t.Fatalf("no leadership after %v", timeout)
	}
	return leading, stop
}
