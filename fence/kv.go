package fence

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"
)

// KV is a fence on the keys of a JetStream Key-Value bucket: each key is a
// resource whose value carries the token of its last write (EncodeValue),
// and Put writes a value only with a token at least as high, by
// compare-and-set on the key's revision. It is safe for concurrent use.
type KV struct {
	kv jetstream.KeyValue
}

// Record is what a fence holds for a resource: its latest data, the token
// it was written with, and where.
type Record struct {
	// Resource is the KV key or the stream subject.
	Resource string
	// Token is the fencing token the data was written with: the highest the
	// resource has accepted.
	Token uint64
	// Data is the data written, without the token.
	Data []byte
	// Revision is the KV revision or the stream sequence of the record.
	Revision uint64
}

// NewKV returns a fence on the keys of kv. It checks that the bucket keeps
// its values (no TTL): a value that ages out takes the highest token with
// it, and the fence would then accept any token. The error matches
// ErrInvalidArgument for a nil or ageing bucket, and wraps the cause if the
// bucket's status cannot be read.
func NewKV(ctx context.Context, kv jetstream.KeyValue) (*KV, error) {
	if kv == nil {
		return nil, invalidf("nil bucket")
	}
	st, err := kv.Status(ctx)
	if err != nil {
		return nil, fmt.Errorf("fence: reading the status of the resource bucket: %w", err)
	}
	if st.TTL() > 0 {
		return nil, invalidf("bucket %s has a TTL of %v: its values age out and take their tokens with them; use a bucket without a TTL", st.Bucket(), st.TTL())
	}
	return &KV{kv: kv}, nil
}

// Put writes data to the key resource with the fencing token, unless the
// key holds a value written with a higher token: then it writes nothing
// and returns a *StaleError (errors.Is(err, ErrStale)). An equal token is
// accepted: a leader writes many times. It returns the new value's
// revision.
//
// The check and the write are one compare-and-set on the revision read: if
// another write lands in between, Put reads again and retries, refusing if
// that write's token is higher. So a value with a lower token never follows
// one with a higher token in the key's history, whatever the interleaving.
// A key absent or deleted holds no token: any token is accepted there.
//
// It returns an error matching ErrInvalidArgument for an empty or invalid
// key or a zero token, ErrNotFenced if the key's value was not written by a
// fence, and the bucket's error (wrapped) if it cannot be read or written,
// or ctx ends.
func (f *KV) Put(ctx context.Context, resource string, token uint64, data []byte) (revision uint64, err error) {
	if err := checkKey(resource); err != nil {
		return 0, err
	}
	if err := checkToken(token); err != nil {
		return 0, err
	}
	value := EncodeValue(token, data)
	for {
		cur, err := f.Get(ctx, resource)
		switch {
		case errors.Is(err, jetstream.ErrKeyNotFound):
			revision, err = f.kv.Create(ctx, resource, value)
			if errors.Is(err, jetstream.ErrKeyExists) || isWrongLastSequence(err) {
				continue // another write created it: check its token
			}
		case err != nil:
			return 0, err
		case cur.Token > token:
			return 0, &StaleError{Resource: resource, Token: token, Highest: cur.Token}
		default:
			revision, err = f.kv.Update(ctx, resource, value, cur.Revision)
			if errors.Is(err, jetstream.ErrKeyRevisionMismatch) || isWrongLastSequence(err) {
				continue // another write came first (or the read was stale): check again
			}
		}
		if err != nil {
			return 0, fmt.Errorf("fence: writing resource %q with token %d: %w", resource, token, err)
		}
		return revision, nil
	}
}

// Get returns the key's latest value as a Record: its data and the token it
// was written with. It returns an error matching jetstream.ErrKeyNotFound
// if the key is absent or deleted, and ErrNotFenced if its value was not
// written by a fence. A Get may be served by a replica that lags: a Put
// never relies on it alone.
func (f *KV) Get(ctx context.Context, resource string) (Record, error) {
	if err := checkKey(resource); err != nil {
		return Record{}, err
	}
	e, err := f.kv.Get(ctx, resource)
	if err != nil {
		return Record{}, fmt.Errorf("fence: reading resource %q: %w", resource, err)
	}
	token, data, err := DecodeValue(e.Value())
	if err != nil {
		return Record{}, fmt.Errorf("resource %q, revision %d: %w", resource, e.Revision(), err)
	}
	return Record{Resource: resource, Token: token, Data: data, Revision: e.Revision()}, nil
}
