package sim

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/kvelect/election/internal/kvcheck"
	"github.com/nats-io/nats.go/jetstream"
)

// history records every write that reaches the server, from every
// candidate and from the client that removes keys, for the linearizability
// check (internal/kvcheck). It records below the faulty bucket (KV): a
// write's call is when it left for the server and its return when the
// server's answer came back, whatever the fault wrapper then told the
// candidate, so most outcomes are known; the wrapper's lies are faults of
// the network, not of the store.
type history struct {
	mu    sync.Mutex
	start time.Time
	ops   []kvcheck.Op
}

func newHistory() *history { return &history{start: time.Now()} }

func (h *history) now() int64 { return int64(time.Since(h.start)) }

func (h *history) add(op kvcheck.Op) {
	h.mu.Lock()
	h.ops = append(h.ops, op)
	h.mu.Unlock()
}

// recorded is a bucket whose writes are recorded in a history under the
// name of the client that makes them.
type recorded struct {
	jetstream.KeyValue
	client string
	h      *history
}

// record runs a write of kind on key and records it: expected is the
// revision an Update requires, conditional says a Delete or Purge may have
// required one (its options cannot be read), value is what it writes.
func (r *recorded) record(key string, kind kvcheck.Kind, expected uint64, conditional bool, value []byte, do func() (uint64, error)) (uint64, error) {
	op := kvcheck.Op{Client: r.client, Key: key, Kind: kind, Expected: expected, Unrecorded: conditional, Value: string(value), Call: r.h.now()}
	rev, err := do()
	op.Return = r.h.now()
	switch {
	case err == nil:
		op.Outcome, op.Rev = kvcheck.OK, rev
	case isConflict(err):
		op.Outcome = kvcheck.Conflict
	default:
		op.Outcome = kvcheck.Unknown
	}
	r.h.add(op)
	return rev, err
}

// isConflict reports whether err is the server refusing a compare-and-set
// (as the election's own test of it does).
func isConflict(err error) bool {
	if errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
		return true
	}
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && (apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
		apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant)
}

func (r *recorded) Create(ctx context.Context, key string, value []byte, opts ...jetstream.KVCreateOpt) (uint64, error) {
	return r.record(key, kvcheck.Create, 0, false, value, func() (uint64, error) { return r.KeyValue.Create(ctx, key, value, opts...) })
}

func (r *recorded) Update(ctx context.Context, key string, value []byte, last uint64) (uint64, error) {
	return r.record(key, kvcheck.Update, last, false, value, func() (uint64, error) { return r.KeyValue.Update(ctx, key, value, last) })
}

func (r *recorded) Put(ctx context.Context, key string, value []byte) (uint64, error) {
	return r.record(key, kvcheck.Put, 0, false, value, func() (uint64, error) { return r.KeyValue.Put(ctx, key, value) })
}

func (r *recorded) Delete(ctx context.Context, key string, opts ...jetstream.KVDeleteOpt) error {
	_, err := r.record(key, kvcheck.Delete, 0, len(opts) > 0, nil, func() (uint64, error) { return 0, r.KeyValue.Delete(ctx, key, opts...) })
	return err
}

func (r *recorded) Purge(ctx context.Context, key string, opts ...jetstream.KVDeleteOpt) error {
	_, err := r.record(key, kvcheck.Purge, 0, len(opts) > 0, nil, func() (uint64, error) { return 0, r.KeyValue.Purge(ctx, key, opts...) })
	return err
}

// brokenCAS is a store that breaks compare-and-set, for the test that the
// check catches one: an Update the server refuses because the key moved on
// is written anyway and reported as won.
type brokenCAS struct{ jetstream.KeyValue }

func (b brokenCAS) Update(ctx context.Context, key string, value []byte, last uint64) (uint64, error) {
	rev, err := b.KeyValue.Update(ctx, key, value, last)
	if isConflict(err) {
		return b.KeyValue.Put(ctx, key, value)
	}
	return rev, err
}

// checkHistory checks the recorded history for linearizability, with ttl
// the time the server keeps a write, within timeout; it returns the
// violations found.
func (h *history) check(ttl, timeout time.Duration) []Violation {
	h.mu.Lock()
	ops := h.ops
	h.mu.Unlock()
	res := kvcheck.Check(ops, ttl, timeout)
	var vs []Violation
	if res.Linearizable != "true" {
		vs = append(vs, Violation{Check: "linearizable", Detail: res.Summary()})
	}
	for _, p := range res.Order {
		vs = append(vs, Violation{Check: "revision order", Detail: p})
	}
	return vs
}
