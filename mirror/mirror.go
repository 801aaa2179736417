// Package mirror reads a KV mirror of an election bucket, for observers:
// a bucket made with jetstream.KeyValueConfig{Mirror:
// &jetstream.StreamSource{Name: B}} in a remote region, say, where reads of
// the mirror are local and survive a cut from the cluster of the election
// bucket B. Open checks that a bucket is a mirror of B, and its KeyValue is
// a read-only jetstream.KeyValue for election.OpenBucket, on which
// Bucket.Observe, ObservePrefix, Leader and Leaders work as on B.
//
// What a mirror says may be stale by any amount: show its Lag beside it,
// and label it as not authoritative. Nothing that decides may read a
// mirror: elections decide by compare-and-set on B and by B's own watcher,
// and an election over a mirror's KeyValue never leads, its every write
// refused (docs/topologies.md, "Mirrors are for observers").
//
// A mirror keeps the origin's subjects: its messages are under $KV.B., not
// $KV.M., so a KeyValue handle of M (which reads $KV.M.) finds nothing, and
// one of B may be answered by any copy. The KeyValue of this package reads
// M's stream under B's subjects itself.
package mirror

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Mirror is a KV mirror of an election bucket, checked to be one.
type Mirror struct {
	name   string // the mirror bucket's name
	bucket string // the origin bucket's name
	stream jetstream.Stream
	ttl    time.Duration // the TTL its readers assume: the mirror's, else the origin's
}

// OriginError is Open's error for a mirror of another bucket than the one
// asked for.
type OriginError struct {
	Mirror string // the mirror's name
	Origin string // the bucket it mirrors
	Bucket string // the bucket asked for
}

// Error says which bucket the mirror mirrors.
func (e *OriginError) Error() string {
	return fmt.Sprintf("bucket %q is a mirror of bucket %q, not of bucket %q", e.Mirror, e.Origin, e.Bucket)
}

// Open checks that the bucket named name is a KV mirror of bucket and
// returns it. A mirror that keeps its keys forever is read with the TTL of
// bucket, read from the server; one with a TTL of its own, with that.
func Open(ctx context.Context, js jetstream.JetStream, name, bucket string) (*Mirror, error) {
	stream, err := js.Stream(ctx, "KV_"+name)
	switch {
	case errors.Is(err, jetstream.ErrStreamNotFound):
		return nil, fmt.Errorf("bucket %q does not exist; want a KV mirror of bucket %q (jetstream.KeyValueConfig{Mirror: &jetstream.StreamSource{Name: %q}})", name, bucket, bucket)
	case err != nil:
		return nil, fmt.Errorf("reading bucket %q: %w", name, err)
	}
	cfg := stream.CachedInfo().Config
	if cfg.Mirror == nil {
		return nil, fmt.Errorf("bucket %q is not a mirror; want a KV mirror of bucket %q (jetstream.KeyValueConfig{Mirror: &jetstream.StreamSource{Name: %q}})", name, bucket, bucket)
	}
	origin, isKV := strings.CutPrefix(cfg.Mirror.Name, "KV_")
	switch {
	case !isKV:
		return nil, fmt.Errorf("bucket %q mirrors stream %q, which is not a KV bucket; want a mirror of bucket %q", name, cfg.Mirror.Name, bucket)
	case origin != bucket:
		return nil, &OriginError{Mirror: name, Origin: origin, Bucket: bucket}
	}
	m := &Mirror{name: name, bucket: bucket, stream: stream, ttl: cfg.MaxAge}
	if m.ttl == 0 {
		ttl, err := originTTL(ctx, js, bucket)
		switch {
		case err != nil:
			return nil, fmt.Errorf("the mirror keeps keys forever and the TTL of bucket %q cannot be read (%v); give the mirror the bucket's TTL", bucket, err)
		case ttl == 0:
			return nil, fmt.Errorf("the mirror and bucket %q both keep keys forever; give the mirror the bucket's TTL", bucket)
		}
		m.ttl = ttl
	}
	return m, nil
}

// originTTL reads the TTL of the bucket.
func originTTL(ctx context.Context, js jetstream.JetStream, bucket string) (time.Duration, error) {
	kv, err := js.KeyValue(ctx, bucket)
	if err != nil {
		return 0, err
	}
	st, err := kv.Status(ctx)
	if err != nil {
		return 0, err
	}
	return st.TTL(), nil
}

// Name is the mirror bucket's name.
func (m *Mirror) Name() string { return m.name }

// Bucket is the name of the election bucket it mirrors.
func (m *Mirror) Bucket() string { return m.bucket }

// TTL is the TTL the mirror's readers assume: the mirror's own, or the
// election bucket's if the mirror keeps keys forever.
func (m *Mirror) TTL() time.Duration { return m.ttl }

// KeyValue is the mirror as a read-only jetstream.KeyValue for
// election.OpenBucket: its Status (with TTL) and its watchers, which read
// the mirror's stream under the origin's subjects. Every write, and every
// read that is not a watch, fails with ErrReadOnly: no election can run on
// it, and no Get can be taken for the truth.
func (m *Mirror) KeyValue() jetstream.KeyValue { return mirrorKV{m} }

// Lag is how far behind the election bucket a mirror is, as its server
// says.
type Lag struct {
	// Messages is how many of the origin's messages the mirror lacks; it is
	// right only while the mirror hears from the origin.
	Messages uint64
	// Heard is how long ago the mirror last heard from the origin; negative
	// if it never has.
	Heard time.Duration
	// Error is the server's error for the mirroring, if it fails.
	Error string
}

// Lag reads the mirror's lag from its server.
func (m *Mirror) Lag(ctx context.Context) (Lag, error) {
	info, err := m.stream.Info(ctx)
	if err != nil {
		return Lag{}, fmt.Errorf("reading mirror %q: %w", m.name, err)
	}
	if info.Mirror == nil {
		return Lag{Heard: -1}, nil
	}
	l := Lag{Messages: info.Mirror.Lag, Heard: info.Mirror.Active}
	if info.Mirror.Error != nil {
		l.Error = info.Mirror.Error.Error()
	}
	return l, nil
}
