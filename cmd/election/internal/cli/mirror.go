package cli

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// An observer over a mirror: election status --mirror M and election
// dashboard --mirror M read a KV mirror of the election bucket B (a bucket
// made with jetstream.KeyValueConfig{Mirror: &jetstream.StreamSource{Name:
// B}}), in a remote region, say, where reads of the mirror are local and
// survive a cut from B's cluster. What a mirror says may be stale by any
// amount: the observers label all of it as not authoritative and show the
// mirror's lag. Nothing that decides ever reads a mirror: elections decide by
// compare-and-set on B and by B's own watcher (docs/topologies.md, "Mirrors
// are for observers").
//
// A mirror keeps the origin's subjects: its messages are under $KV.B.,
// not $KV.M., so a KeyValue handle of M (which reads $KV.M.) finds
// nothing, and one of B may be answered by any copy. mirrorKV reads M's
// stream under B's subjects itself.

// mirrorSource is a mirror of the election bucket, checked to be one.
type mirrorSource struct {
	name   string // the mirror bucket's name
	bucket string // the origin bucket's name
	stream jetstream.Stream
	ttl    time.Duration // the TTL its readers assume: the mirror's, else the origin's
}

// openMirror checks that the bucket named mirror is a KV mirror of bucket
// and returns it. ttlOf reads the origin's TTL, for a mirror that keeps keys
// forever; it is called only then.
func openMirror(ctx context.Context, js jetstream.JetStream, mirror, bucket string, ttlOf func(context.Context) (time.Duration, error)) (*mirrorSource, error) {
	stream, err := js.Stream(ctx, "KV_"+mirror)
	switch {
	case errors.Is(err, jetstream.ErrStreamNotFound):
		return nil, fmt.Errorf("--mirror %s: bucket %q does not exist; want a KV mirror of bucket %q (jetstream.KeyValueConfig{Mirror: &jetstream.StreamSource{Name: %q}})", mirror, mirror, bucket, bucket)
	case err != nil:
		return nil, fmt.Errorf("--mirror %s: reading bucket %q: %w", mirror, mirror, err)
	}
	cfg := stream.CachedInfo().Config
	if cfg.Mirror == nil {
		return nil, fmt.Errorf("--mirror %s: bucket %q is not a mirror; want a KV mirror of bucket %q (jetstream.KeyValueConfig{Mirror: &jetstream.StreamSource{Name: %q}})", mirror, mirror, bucket, bucket)
	}
	origin, isKV := strings.CutPrefix(cfg.Mirror.Name, "KV_")
	switch {
	case !isKV:
		return nil, fmt.Errorf("--mirror %s: bucket %q mirrors stream %q, which is not a KV bucket; want a mirror of bucket %q", mirror, mirror, cfg.Mirror.Name, bucket)
	case origin != bucket:
		return nil, fmt.Errorf("--mirror %s: bucket %q is a mirror of bucket %q, not of bucket %q (--bucket); pass --bucket %s, or the mirror of %q", mirror, mirror, origin, bucket, origin, bucket)
	}
	m := &mirrorSource{name: mirror, bucket: bucket, stream: stream, ttl: cfg.MaxAge}
	if m.ttl == 0 {
		ttl, err := ttlOf(ctx)
		switch {
		case err != nil:
			return nil, fmt.Errorf("--mirror %s: the mirror keeps keys forever and the TTL of bucket %q cannot be read (%v); give the mirror the bucket's TTL", mirror, bucket, err)
		case ttl == 0:
			return nil, fmt.Errorf("--mirror %s: the mirror and bucket %q both keep keys forever; give the mirror the bucket's TTL", mirror, bucket)
		}
		m.ttl = ttl
	}
	return m, nil
}

// mirrorLag is how far behind the origin a mirror is, as its server says.
type mirrorLag struct {
	// Messages is how many of the origin's messages the mirror lacks; it is
	// right only while the mirror hears from the origin.
	Messages uint64
	// Heard is how long ago the mirror last heard from the origin; negative
	// if it never has.
	Heard time.Duration
	// Error is the server's error for the mirroring, if it fails.
	Error string
}

// lag reads the mirror's lag.
func (m *mirrorSource) lag(ctx context.Context) (mirrorLag, error) {
	info, err := m.stream.Info(ctx)
	if err != nil {
		return mirrorLag{}, fmt.Errorf("reading mirror %q: %w", m.name, err)
	}
	if info.Mirror == nil {
		return mirrorLag{Heard: -1}, nil
	}
	l := mirrorLag{Messages: info.Mirror.Lag, Heard: info.Mirror.Active}
	if info.Mirror.Error != nil {
		l.Error = info.Mirror.Error.Error()
	}
	return l, nil
}

// label is the line that says where what follows comes from.
func (m *mirrorSource) label() string {
	return fmt.Sprintf("from mirror %s of bucket %s: not authoritative, may be stale", m.name, m.bucket)
}

// describe tells the lag: "lag 0 messages, last heard from bucket B 120ms ago".
func (l mirrorLag) describe(bucket string) string {
	s := fmt.Sprintf("lag %d messages, ", l.Messages)
	if l.Heard < 0 {
		s += "never heard from bucket " + bucket
	} else {
		s += fmt.Sprintf("last heard from bucket %s %v ago", bucket, l.Heard.Round(time.Millisecond))
	}
	if l.Error != "" {
		s += "; mirroring fails: " + l.Error
	}
	return s
}

// mirrorJSON is the mirror a JSON output reads, with its lag.
type mirrorJSON struct {
	Mirror        string   `json:"mirror"`
	Bucket        string   `json:"bucket"`
	Authoritative bool     `json:"authoritative"` // always false: a mirror may be stale
	Note          string   `json:"note"`
	Lag           uint64   `json:"lag_messages"`
	HeardSeconds  *float64 `json:"heard_seconds_ago,omitempty"` // absent if the mirror never heard from the origin
	Error         string   `json:"mirror_error,omitempty"`
}

func (m *mirrorSource) toJSON(l mirrorLag) mirrorJSON {
	j := mirrorJSON{Mirror: m.name, Bucket: m.bucket, Note: m.label(), Lag: l.Messages, Error: l.Error}
	if l.Heard >= 0 {
		heard := l.Heard.Seconds()
		j.HeardSeconds = &heard
	}
	return j
}

// errMirrorReadOnly is what mirrorKV answers to everything but watching.
var errMirrorReadOnly = errors.New("a mirror is read only for observers: it is never written, and read only by its watcher")

// mirrorKV is the mirror as a read-only jetstream.KeyValue for
// election.OpenBucket: its Status and its watchers, which read the mirror's
// stream under the origin's subjects. Every write, and every read that is
// not a watch, fails: no election can run on it, and no Get can be taken for
// the truth.
type mirrorKV struct {
	m *mirrorSource
}

var _ jetstream.KeyValue = mirrorKV{}

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

func (kv mirrorKV) WatchAll(ctx context.Context, opts ...jetstream.WatchOpt) (jetstream.KeyWatcher, error) {
	return kv.WatchFiltered(ctx, nil, opts...)
}

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
	return nil, errMirrorReadOnly
}
func (mirrorKV) GetRevision(context.Context, string, uint64) (jetstream.KeyValueEntry, error) {
	return nil, errMirrorReadOnly
}
func (mirrorKV) Put(context.Context, string, []byte) (uint64, error) { return 0, errMirrorReadOnly }
func (mirrorKV) PutString(context.Context, string, string) (uint64, error) {
	return 0, errMirrorReadOnly
}
func (mirrorKV) Create(context.Context, string, []byte, ...jetstream.KVCreateOpt) (uint64, error) {
	return 0, errMirrorReadOnly
}
func (mirrorKV) Update(context.Context, string, []byte, uint64) (uint64, error) {
	return 0, errMirrorReadOnly
}
func (mirrorKV) Delete(context.Context, string, ...jetstream.KVDeleteOpt) error {
	return errMirrorReadOnly
}
func (mirrorKV) Purge(context.Context, string, ...jetstream.KVDeleteOpt) error {
	return errMirrorReadOnly
}
func (mirrorKV) Keys(context.Context, ...jetstream.WatchOpt) ([]string, error) {
	return nil, errMirrorReadOnly
}
func (mirrorKV) ListKeys(context.Context, ...jetstream.WatchOpt) (jetstream.KeyLister, error) {
	return nil, errMirrorReadOnly
}
func (mirrorKV) ListKeysFiltered(context.Context, ...string) (jetstream.KeyLister, error) {
	return nil, errMirrorReadOnly
}
func (mirrorKV) History(context.Context, string, ...jetstream.WatchOpt) ([]jetstream.KeyValueEntry, error) {
	return nil, errMirrorReadOnly
}
func (mirrorKV) PurgeDeletes(context.Context, ...jetstream.KVPurgeOpt) error {
	return errMirrorReadOnly
}
