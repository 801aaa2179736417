//go:build unix

package record

import (
	"context"
	"errors"

	"github.com/nats-io/nats.go/jetstream"
)

// KV records the writes made through it (Create, Update, Delete,
// Purge, Put): the key, when each was sent, when it returned, and how; an
// Update's expected revision. Each is recorded twice: as it is sent and as
// it returns, so that a write in flight when the process is killed is known
// (the server may have applied it) although it never returns.
type KV struct {
	jetstream.KeyValue
	Rec *Recorder
	// DaemonOf, if set, names the daemon a key belongs to (a fleet run's
	// many keys).
	DaemonOf func(key string) (daemon string, ok bool)
	// Acked, if set, is signalled (without blocking) when a Create or
	// Update returns without error.
	Acked chan<- struct{}
}

// Create records a Create call.
func (r *KV) Create(ctx context.Context, key string, value []byte, opts ...jetstream.KVCreateOpt) (uint64, error) {
	sent := r.call(key, "create", value)
	rev, err := r.KeyValue.Create(ctx, key, value, opts...)
	r.op(key, "create", value, sent, rev, err)
	r.ack(err)
	return rev, err
}

// Update records an Update call.
func (r *KV) Update(ctx context.Context, key string, value []byte, revision uint64) (uint64, error) {
	sent := r.call(key, "update", value, revision)
	rev, err := r.KeyValue.Update(ctx, key, value, revision)
	r.op(key, "update", value, sent, rev, err, revision)
	r.ack(err)
	return rev, err
}

// Put records a Put call.
func (r *KV) Put(ctx context.Context, key string, value []byte) (uint64, error) {
	sent := r.call(key, "put", value)
	rev, err := r.KeyValue.Put(ctx, key, value)
	r.op(key, "put", value, sent, rev, err)
	return rev, err
}

// Purge records a Purge call.
func (r *KV) Purge(ctx context.Context, key string, opts ...jetstream.KVDeleteOpt) error {
	sent := r.call(key, "purge", nil)
	err := r.KeyValue.Purge(ctx, key, opts...)
	r.op(key, "purge", nil, sent, 0, err)
	return err
}

// Delete records a Delete call.
func (r *KV) Delete(ctx context.Context, key string, opts ...jetstream.KVDeleteOpt) error {
	sent := r.call(key, "delete", nil)
	err := r.KeyValue.Delete(ctx, key, opts...)
	r.op(key, "delete", nil, sent, 0, err)
	return err
}

// ack signals acked, if set, after a write that returned without error.
func (r *KV) ack(err error) {
	if r.Acked == nil || err != nil {
		return
	}
	select {
	case r.Acked <- struct{}{}:
	default:
	}
}

// call records a call on key about to be sent, with what it writes and for
// an update the revision it expects, and returns when it was sent.
func (r *KV) call(key, op string, value []byte, expected ...uint64) int64 {
	ev := Event{Kind: "call", Op: op, Key: key, Value: string(value), Sent: Now()}
	ev.T = ev.Sent
	if len(expected) > 0 {
		ev.Expected = expected[0]
	}
	if r.DaemonOf != nil {
		ev.Daemon, _ = r.DaemonOf(key)
	}
	r.Rec.Record(ev)
	return ev.Sent
}

// op records one call on key: what it wrote, when it was sent, its
// revision, how it ended, and for an update the revision it expected.
func (r *KV) op(key, op string, value []byte, sent int64, rev uint64, err error, expected ...uint64) {
	ev := Event{Kind: "op", Op: op, Key: key, Value: string(value), Sent: sent, Rev: rev, Outcome: "ok"}
	if len(expected) > 0 {
		ev.Expected = expected[0]
	}
	if r.DaemonOf != nil {
		ev.Daemon, _ = r.DaemonOf(key)
	}
	if err != nil {
		ev.Outcome = "error"
		if errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
			ev.Outcome = "conflict"
		}
		ev.Err = err.Error()
	}
	r.Rec.Record(ev)
}
