// Package history keeps a bucket's leadership history: who led each key,
// from when to when, and why leadership moved. An election records in it
// through its event hook (election.WithEventHook(h.Record)); anyone reads
// it with Events, and election history prints it.
package history

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/kvelect/election"
	"github.com/kvelect/election/internal/natscause"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// A bucket's leadership history is a JetStream stream of its own,
// KVELECT_HISTORY_<bucket>, on the subjects kvelect.history.<bucket>.<key>:
// every election whose event hook is History.Record records there, once each, the moment it
// announces leadership (with how the key became free) and the moment it
// stands down (with the cause). A leader that crashes cannot record its end;
// its successor's win says how the key became free. Each record carries a
// message ID made of the bucket, key, fencing token and event, so that a
// record sent again after a lost acknowledgement is stored once (within the
// stream's duplicate window). The stream keeps records for its retention,
// whatever happens to the processes that wrote them.

// DefaultRetention is how long Create keeps records unless
// told otherwise.
const DefaultRetention = 7 * 24 * time.Hour

// Errors of the leadership history.
var (
	// ErrNoHistory means the bucket has no history stream; Create
	// (or election bucket create --history) makes one.
	ErrNoHistory = errors.New("history: no leadership history for the bucket")
	// ErrInvalidRetention means a retention below a minute.
	ErrInvalidRetention = errors.New("history: invalid retention")
)

// Kinds of history events.
const (
	Won       = "won"        // a candidate announced leadership
	StoodDown = "stood_down" // a leader stood down
)

// Event is one record of a bucket's leadership history.
type Event struct {
	Key   string `json:"key"`
	Name  string `json:"name"`  // the candidate
	Kind  string `json:"kind"`  // Won or StoodDown
	Token uint64 `json:"token"` // the leadership's fencing token
	// After says, for a win, how the key became free: "no key" (never
	// held, or aged out), "released by NAME", "handed over to NAME",
	// "deleted", or "purged" (or an expiry marker).
	After string `json:"after,omitempty"`
	// Cause says, for a stand-down, why (an error's text; see OnLost).
	Cause string `json:"cause,omitempty"`
	// At is when the event was recorded, by the server's clock.
	At time.Time `json:"-"`
}

// History is a bucket's leadership history stream.
type History struct {
	js     jetstream.JetStream
	bucket string
	stream jetstream.Stream
	log    *slog.Logger

	mu        sync.Mutex
	recorders map[[2]string]*recorder // by key and candidate name
	failed    bool                    // a record could not be sent or was dropped
}

// Option configures a History; pass options to Create or Open.
type Option func(h *History)

// WithLogger sets the logger of what the history cannot record; the
// default discards. The first failure of a History (a record it could not
// send, or dropped) is logged as a warning and later ones at debug level,
// so that a process without the permission to write the history warns once,
// not at every change of leadership.
func WithLogger(l *slog.Logger) Option {
	return func(h *History) { h.log = l }
}

// newHistory returns the History of bucket on stream.
func newHistory(js jetstream.JetStream, bucket string, stream jetstream.Stream, opts []Option) *History {
	h := &History{js: js, bucket: bucket, stream: stream, log: slog.New(slog.DiscardHandler), recorders: map[[2]string]*recorder{}}
	for _, opt := range opts {
		opt(h)
	}
	return h
}

func historyStream(bucket string) string  { return "KVELECT_HISTORY_" + bucket }
func historySubject(bucket string) string { return "kvelect.history." + bucket }

// Create makes the history stream of bucket, keeping records for
// retention (0: DefaultRetention), stored as the bucket's stream is
// (replicas and storage) and where it is (its cluster and placement tags,
// so that in a supercluster the history lives in the bucket's home region,
// not in the region of the client that creates it); if it exists, it is
// left as it is and opened.
func Create(ctx context.Context, js jetstream.JetStream, bucket string, retention time.Duration, opts ...Option) (*History, error) {
	if err := election.CheckBucketName(bucket); err != nil {
		return nil, err
	}
	switch {
	case retention == 0:
		retention = DefaultRetention
	case retention < time.Minute:
		return nil, fmt.Errorf("%w %v: want a minute or more (0: %v)", ErrInvalidRetention, retention, DefaultRetention)
	}
	cfg := jetstream.StreamConfig{
		Name:        historyStream(bucket),
		Description: "kvelect leadership history of bucket " + bucket,
		Subjects:    []string{historySubject(bucket) + ".>"},
		MaxAge:      retention,
		Storage:     jetstream.FileStorage,
		Replicas:    1,
		Duplicates:  2 * time.Minute,
	}
	if kv, err := js.KeyValue(ctx, bucket); err == nil {
		if status, err := kv.Status(ctx); err == nil {
			if bs, ok := status.(*jetstream.KeyValueBucketStatus); ok && bs.StreamInfo() != nil {
				info := bs.StreamInfo()
				cfg.Replicas, cfg.Storage = info.Config.Replicas, info.Config.Storage
				if p := info.Config.Placement; p != nil {
					cfg.Placement = &jetstream.Placement{Cluster: p.Cluster, Tags: p.Tags}
				}
				if info.Cluster != nil && info.Cluster.Name != "" {
					if cfg.Placement == nil {
						cfg.Placement = &jetstream.Placement{}
					}
					cfg.Placement.Cluster = info.Cluster.Name
				}
			}
		}
	}
	stream, err := js.CreateStream(ctx, cfg)
	if errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
		return Open(ctx, js, bucket, opts...)
	}
	if err != nil {
		return nil, fmt.Errorf("creating the history stream %s: %w", cfg.Name, err)
	}
	return newHistory(js, bucket, stream, opts), nil
}

// Open opens the history stream of bucket; ErrNoHistory if there is
// none.
func Open(ctx context.Context, js jetstream.JetStream, bucket string, opts ...Option) (*History, error) {
	if err := election.CheckBucketName(bucket); err != nil {
		return nil, err
	}
	stream, err := js.Stream(ctx, historyStream(bucket))
	switch {
	case errors.Is(err, jetstream.ErrStreamNotFound):
		return nil, fmt.Errorf("%w %q: create it with history.Create, or: election bucket create --bucket %s --history 7d", ErrNoHistory, bucket, bucket)
	case err != nil:
		return nil, fmt.Errorf("opening the history of bucket %q: %w", bucket, err)
	}
	return newHistory(js, bucket, stream, opts), nil
}

// Retention returns how long the history keeps records.
func (h *History) Retention() time.Duration {
	return h.stream.CachedInfo().Config.MaxAge
}

// record sends ev, retrying with its message ID until it is acknowledged or
// ctx is done, each attempt within timeout; each failed attempt is a
// failure.
func (h *History) record(ctx context.Context, ev Event, timeout time.Duration) error {
	data, err := json.Marshal(ev)
	if err != nil {
		return err
	}
	id := fmt.Sprintf("%s/%s/%d/%s", h.bucket, ev.Key, ev.Token, ev.Kind)
	for wait := 50 * time.Millisecond; ; wait = min(2*wait, time.Second) {
		opCtx, cancel := context.WithTimeout(ctx, timeout)
		_, err = h.js.Publish(opCtx, historySubject(h.bucket)+"."+ev.Key, data, jetstream.WithMsgID(id))
		cancel()
		if err == nil || ctx.Err() != nil {
			return err
		}
		h.failure("could not record a leadership event in the history; retrying", err, "key", ev.Key, "name", ev.Name, "event", ev.Kind, "token", ev.Token)
		if !sleep(ctx, wait) {
			return err
		}
	}
}

// Events returns the recorded events of key ("": every key) since the given
// time (zero: all the history keeps), oldest first.
func (h *History) Events(ctx context.Context, key string, since time.Time) ([]Event, error) {
	if key != "" {
		if err := election.CheckKey(key); err != nil {
			return nil, err
		}
	}
	subject := historySubject(h.bucket) + ".>"
	if key != "" {
		subject = historySubject(h.bucket) + "." + key
	}
	cfg := jetstream.ConsumerConfig{
		FilterSubject:     subject,
		AckPolicy:         jetstream.AckNonePolicy,
		MemoryStorage:     true,
		InactiveThreshold: time.Minute, // if the deletion below is lost
	}
	if !since.IsZero() {
		cfg.DeliverPolicy, cfg.OptStartTime = jetstream.DeliverByStartTimePolicy, &since
	}
	consumer, err := h.stream.CreateConsumer(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("reading the history of bucket %q: %w", h.bucket, err)
	}
	defer func() {
		deleteCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = h.stream.DeleteConsumer(deleteCtx, consumer.CachedInfo().Name)
	}()
	info, err := consumer.Info(ctx)
	if err != nil {
		return nil, fmt.Errorf("reading the history of bucket %q: %w", h.bucket, err)
	}
	var events []Event
	for pending := info.NumPending; pending > 0; {
		batch, err := consumer.Fetch(int(min(pending, 1000)), jetstream.FetchContext(ctx))
		if err != nil {
			return nil, fmt.Errorf("reading the history of bucket %q: %w", h.bucket, err)
		}
		got := 0
		for msg := range batch.Messages() {
			got++
			meta, err := msg.Metadata()
			if err != nil {
				return nil, err
			}
			pending = meta.NumPending
			var ev Event
			if json.Unmarshal(msg.Data(), &ev) != nil {
				continue // not a record of ours
			}
			ev.At = meta.Timestamp
			events = append(events, ev)
		}
		if err := batch.Error(); err != nil {
			return nil, fmt.Errorf("reading the history of bucket %q: %w", h.bucket, err)
		}
		if got == 0 {
			break
		}
	}
	return events, nil
}

// Record is an election's event hook (election.WithEventHook(h.Record))
// that records its wins and stand-downs in the history. Records are sent in
// the background, in order, and retried until acknowledged or, once the
// election has stopped, until its KV call timeout has passed (EventStopped
// waits for them that long); they never delay the election otherwise. One
// History records for any number of elections.
func (h *History) Record(ev election.Event) {
	switch ev.Kind {
	case election.EventCampaigning:
		h.mu.Lock()
		defer h.mu.Unlock()
		r := h.recorders[[2]string{ev.Key, ev.Name}]
		if r == nil {
			r = h.startRecorder()
			h.recorders[[2]string{ev.Key, ev.Name}] = r
		}
		r.users++
	case election.EventWon:
		h.queue(ev, Event{Kind: Won, Token: ev.Token, After: ev.After})
	case election.EventLost:
		h.queue(ev, Event{Kind: StoodDown, Token: ev.Token, Cause: ev.Err.Error()})
	case election.EventStopped:
		h.mu.Lock()
		r := h.recorders[[2]string{ev.Key, ev.Name}]
		if r == nil {
			h.mu.Unlock()
			return
		}
		if r.users--; r.users > 0 {
			h.mu.Unlock()
			return
		}
		delete(h.recorders, [2]string{ev.Key, ev.Name})
		h.mu.Unlock()
		r.stop(ev.Duration)
	}
}

// recorder sends the records of the elections of one key and candidate
// name, in order, in the background, until stop.
type recorder struct {
	users  int // elections of the key and name campaigning
	events chan Event
	cancel context.CancelFunc
	done   chan struct{}
}

// recorderBuffer bounds the records waiting to be sent; a leader records
// two per tenure, so it fills only when the history's server is
// unreachable for many tenures, and then the oldest are kept and the
// newest dropped.
const recorderBuffer = 64

// attemptTimeout bounds one attempt to send a record.
const attemptTimeout = 5 * time.Second

func (h *History) startRecorder() *recorder {
	ctx, cancel := context.WithCancel(context.Background())
	r := &recorder{events: make(chan Event, recorderBuffer), cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(r.done)
		for ev := range r.events {
			if err := h.record(ctx, ev, attemptTimeout); err != nil {
				h.failure("could not record a leadership event in the history", err, "key", ev.Key, "name", ev.Name, "event", ev.Kind, "token", ev.Token)
			}
		}
	}()
	return r
}

// queue queues the record of the election event ev.
func (h *History) queue(ev election.Event, rec Event) {
	rec.Key, rec.Name = ev.Key, ev.Name
	h.mu.Lock()
	defer h.mu.Unlock()
	r := h.recorders[[2]string{ev.Key, ev.Name}]
	if r == nil {
		return // an election that did not announce its campaign to this hook
	}
	select {
	case r.events <- rec:
	default:
		h.failureLocked("the history recorder is behind; dropped an event", nil, "key", ev.Key, "name", ev.Name, "event", rec.Kind, "token", rec.Token)
	}
}

// failure logs what the history could not record, and err, why (nil: no
// call failed): the History's first failure as a warning, with what err
// means about the link to the servers, and, for a call that got no answer
// (which is also how a denied publish looks), what permission writing
// needs; later failures at debug level.
func (h *History) failure(msg string, err error, args ...any) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.failureLocked(msg, err, args...)
}

// failureLocked is failure with h.mu held.
func (h *History) failureLocked(msg string, err error, args ...any) {
	if err != nil {
		args = append(args, "error", err)
		if cause := natscause.Explain(err); cause != "" {
			args = append(args, "cause", cause)
		}
		if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout) || errors.Is(err, nats.ErrNoResponders) {
			args = append(args, "hint", "a denied publish gets no answer too: recording needs the permission to publish to "+
				historySubject(h.bucket)+".> (election permissions --role candidate --history)")
		}
	}
	if h.failed {
		h.log.Debug(msg, args...)
		return
	}
	h.failed = true
	h.log.Warn(msg+"; later failures are logged at debug level", args...)
}

// stop sends what is queued, within timeout, and ends the recorder.
func (r *recorder) stop(timeout time.Duration) {
	close(r.events)
	defer r.cancel()
	select {
	case <-r.done:
	case <-time.After(timeout):
		r.cancel()
		<-r.done
	}
}

// sleep waits for d or until ctx is done, and reports whether d passed.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
