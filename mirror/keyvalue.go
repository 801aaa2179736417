package mirror

import (
	"context"
	"errors"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// ErrReadOnly is what a mirror's KeyValue answers to everything but
// watching and its status.
var ErrReadOnly = errors.New("a mirror is read only for observers: it is never written, and read only by its watcher")

// mirrorKV is the mirror as a read-only jetstream.KeyValue (Mirror.KeyValue).
type mirrorKV struct {
	m *Mirror
}

var _ jetstream.KeyValue = mirrorKV{}

// Bucket is the mirror's name.
func (kv mirrorKV) Bucket() string { return kv.m.name }

// Status is the mirror's status, with the TTL of the mirror, or of the
// origin if the mirror keeps keys forever.
func (kv mirrorKV) Status(ctx context.Context) (jetstream.KeyValueStatus, error) {
	info, err := kv.m.stream.Info(ctx)
	if err != nil {
		return nil, err
	}
	return mirrorStatus{info: info, ttl: kv.m.ttl}, nil
}

// WatchAll watches every key (WatchFiltered).
func (kv mirrorKV) WatchAll(ctx context.Context, opts ...jetstream.WatchOpt) (jetstream.KeyWatcher, error) {
	return kv.WatchFiltered(ctx, nil, opts...)
}

// Watch watches the keys that match keys (WatchFiltered).
func (kv mirrorKV) Watch(ctx context.Context, keys string, opts ...jetstream.WatchOpt) (jetstream.KeyWatcher, error) {
	return kv.WatchFiltered(ctx, []string{keys}, opts...)
}

// WatchFiltered watches keys (none: all), delivering the latest entry of
// each, then nil, then every new one, like a KeyValue's watcher. It takes no
// options: the elections' watchers use none.
func (kv mirrorKV) WatchFiltered(ctx context.Context, keys []string, opts ...jetstream.WatchOpt) (jetstream.KeyWatcher, error) {
	if len(opts) > 0 {
		return nil, errors.New("a mirror's watcher takes no options")
	}
	prefix := "$KV." + kv.m.bucket + "."
	filters := []string{prefix + ">"}
	if len(keys) > 0 {
		filters = make([]string, len(keys))
		for i, k := range keys {
			filters[i] = prefix + k
		}
	}
	cons, err := kv.m.stream.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{
		FilterSubjects: filters,
		DeliverPolicy:  jetstream.DeliverLastPerSubjectPolicy,
	})
	if err != nil {
		return nil, err
	}
	w := &mirrorWatcher{bucket: kv.m.name, prefix: prefix, updates: make(chan jetstream.KeyValueEntry, 256), done: make(chan struct{})}
	// The handler waits for the count of the initial entries.
	w.mu.Lock()
	defer w.mu.Unlock()
	cc, err := cons.Consume(w.handle)
	if err != nil {
		return nil, err
	}
	w.cc = cc
	info := cons.CachedInfo()
	if info == nil || info.NumPending == 0 {
		w.initDone = true
		w.send(nil)
	} else {
		w.initPending = info.NumPending
	}
	context.AfterFunc(ctx, func() { _ = w.Stop() }) // as nats.go's watcher does
	return w, nil
}

// mirrorWatcher delivers the entries of an ordered consumer on the mirror.
type mirrorWatcher struct {
	bucket   string
	prefix   string // of the origin's subjects: "$KV.B."
	updates  chan jetstream.KeyValueEntry
	done     chan struct{} // closed by Stop: no more sends
	cc       jetstream.ConsumeContext
	stopOnce sync.Once

	mu          sync.Mutex
	closed      bool // updates is closed
	initDone    bool
	received    uint64
	initPending uint64
}

// Updates delivers the entries, as a KeyValue's watcher does.
func (w *mirrorWatcher) Updates() <-chan jetstream.KeyValueEntry { return w.updates }

// Stop ends the consumer, waits (briefly) for it to close, and then closes
// the channel of updates, as nats.go's watcher does once stopped: the
// election's watcher reads a stopped watcher to its end.
func (w *mirrorWatcher) Stop() error {
	w.stopOnce.Do(func() {
		close(w.done) // a handler blocked on a send gives up, and lets go of mu
		w.cc.Stop()
		select {
		case <-w.cc.Closed():
		case <-time.After(5 * time.Second):
		}
		w.mu.Lock()
		defer w.mu.Unlock()
		w.closed = true
		close(w.updates)
	})
	return nil
}

// send delivers e (nil: the initial entries are all delivered) unless the
// watcher is stopped. Call it with mu held.
func (w *mirrorWatcher) send(e jetstream.KeyValueEntry) {
	if w.closed {
		return
	}
	select {
	case w.updates <- e:
	case <-w.done:
	}
}

// handle turns a message of the mirror into an entry, as nats.go's watcher
// does: its operation from the KV-Operation header or the server's marker
// reason, its revision and time the origin's (a mirror keeps both).
func (w *mirrorWatcher) handle(msg jetstream.Msg) {
	meta, err := msg.Metadata()
	if err != nil || !strings.HasPrefix(msg.Subject(), w.prefix) {
		return
	}
	e := &mirrorEntry{bucket: w.bucket, key: strings.TrimPrefix(msg.Subject(), w.prefix), value: msg.Data(),
		revision: meta.Sequence.Stream, created: meta.Timestamp, delta: meta.NumPending, op: jetstream.KeyValuePut}
	h := msg.Headers()
	switch h.Get("KV-Operation") {
	case "DEL":
		e.op = jetstream.KeyValueDelete
	case "PURGE":
		e.op = jetstream.KeyValuePurge
	case "":
		switch h.Get(jetstream.MarkerReasonHeader) {
		case "MaxAge", "Purge":
			e.op = jetstream.KeyValuePurge
		case "Remove":
			e.op = jetstream.KeyValueDelete
		}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.send(e)
	if !w.initDone {
		w.received++
		if w.received >= w.initPending || meta.NumPending == 0 {
			w.initDone = true
			w.send(nil)
		}
	}
}

// mirrorEntry is an entry read from the mirror.
type mirrorEntry struct {
	bucket, key string
	value       []byte
	revision    uint64
	created     time.Time
	delta       uint64
	op          jetstream.KeyValueOp
}

func (e *mirrorEntry) Bucket() string                  { return e.bucket }
func (e *mirrorEntry) Key() string                     { return e.key }
func (e *mirrorEntry) Value() []byte                   { return e.value }
func (e *mirrorEntry) Revision() uint64                { return e.revision }
func (e *mirrorEntry) Created() time.Time              { return e.created }
func (e *mirrorEntry) Delta() uint64                   { return e.delta }
func (e *mirrorEntry) Operation() jetstream.KeyValueOp { return e.op }

// mirrorStatus is a mirror's status with the TTL its readers assume.
type mirrorStatus struct {
	info *jetstream.StreamInfo
	ttl  time.Duration
}

func (s mirrorStatus) Bucket() string       { return strings.TrimPrefix(s.info.Config.Name, "KV_") }
func (s mirrorStatus) Values() uint64       { return s.info.State.Msgs }
func (s mirrorStatus) History() int64       { return s.info.Config.MaxMsgsPerSubject }
func (s mirrorStatus) TTL() time.Duration   { return s.ttl }
func (s mirrorStatus) BackingStore() string { return "JetStream" }
func (s mirrorStatus) Bytes() uint64        { return s.info.State.Bytes }
func (s mirrorStatus) IsCompressed() bool {
	return s.info.Config.Compression != jetstream.NoCompression
}
func (s mirrorStatus) LimitMarkerTTL() time.Duration { return s.info.Config.SubjectDeleteMarkerTTL }
func (s mirrorStatus) Metadata() map[string]string   { return s.info.Config.Metadata }
func (s mirrorStatus) Config() jetstream.KeyValueConfig {
	return jetstream.KeyValueConfig{Bucket: s.Bucket(), TTL: s.ttl, History: uint8(s.History()), Replicas: s.info.Config.Replicas}
}

// The rest of jetstream.KeyValue: refused.

func (mirrorKV) Get(context.Context, string) (jetstream.KeyValueEntry, error) {
	return nil, ErrReadOnly
}
func (mirrorKV) GetRevision(context.Context, string, uint64) (jetstream.KeyValueEntry, error) {
	return nil, ErrReadOnly
}
func (mirrorKV) Put(context.Context, string, []byte) (uint64, error) { return 0, ErrReadOnly }
func (mirrorKV) PutString(context.Context, string, string) (uint64, error) {
	return 0, ErrReadOnly
}
func (mirrorKV) Create(context.Context, string, []byte, ...jetstream.KVCreateOpt) (uint64, error) {
	return 0, ErrReadOnly
}
func (mirrorKV) Update(context.Context, string, []byte, uint64) (uint64, error) {
	return 0, ErrReadOnly
}
func (mirrorKV) Delete(context.Context, string, ...jetstream.KVDeleteOpt) error {
	return ErrReadOnly
}
func (mirrorKV) Purge(context.Context, string, ...jetstream.KVDeleteOpt) error {
	return ErrReadOnly
}
func (mirrorKV) Keys(context.Context, ...jetstream.WatchOpt) ([]string, error) {
	return nil, ErrReadOnly
}
func (mirrorKV) ListKeys(context.Context, ...jetstream.WatchOpt) (jetstream.KeyLister, error) {
	return nil, ErrReadOnly
}
func (mirrorKV) ListKeysFiltered(context.Context, ...string) (jetstream.KeyLister, error) {
	return nil, ErrReadOnly
}
func (mirrorKV) History(context.Context, string, ...jetstream.WatchOpt) ([]jetstream.KeyValueEntry, error) {
	return nil, ErrReadOnly
}
func (mirrorKV) PurgeDeletes(context.Context, ...jetstream.KVPurgeOpt) error {
	return ErrReadOnly
}
