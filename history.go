package election

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// A bucket's leadership history is a JetStream stream of its own,
// KVELECT_HISTORY_<bucket>, on the subjects kvelect.history.<bucket>.<key>:
// every election made WithHistory records there, once each, the moment it
// announces leadership (with how the key became free) and the moment it
// stands down (with the cause). A leader that crashes cannot record its end;
// its successor's win says how the key became free. Each record carries a
// message ID made of the bucket, key, fencing token and event, so that a
// record sent again after a lost acknowledgement is stored once (within the
// stream's duplicate window). The stream keeps records for its retention,
// whatever happens to the processes that wrote them.

// DefaultHistoryRetention is how long CreateHistory keeps records unless
// told otherwise.
const DefaultHistoryRetention = 7 * 24 * time.Hour

// Errors of the leadership history.
var (
	// ErrNoHistory means the bucket has no history stream; CreateHistory
	// (or election bucket create --history) makes one.
	ErrNoHistory = errors.New("election: no leadership history for the bucket")
	// ErrInvalidRetention means a retention below a minute.
	ErrInvalidRetention = errors.New("election: invalid history retention")
)

// Kinds of history events.
const (
	EventWon       = "won"        // a candidate announced leadership
	EventStoodDown = "stood_down" // a leader stood down
)

// HistoryEvent is one record of a bucket's leadership history.
type HistoryEvent struct {
	Key   string `json:"key"`
	Name  string `json:"name"`  // the candidate
	Kind  string `json:"kind"`  // EventWon or EventStoodDown
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
}

func historyStream(bucket string) string  { return "KVELECT_HISTORY_" + bucket }
func historySubject(bucket string) string { return "kvelect.history." + bucket }

// CreateHistory makes the history stream of bucket, keeping records for
// retention (0: DefaultHistoryRetention), stored as the bucket's stream is
// (replicas and storage); if it exists, it is left as it is and opened.
func CreateHistory(ctx context.Context, js jetstream.JetStream, bucket string, retention time.Duration) (*History, error) {
	if err := CheckBucketName(bucket); err != nil {
		return nil, err
	}
	switch {
	case retention == 0:
		retention = DefaultHistoryRetention
	case retention < time.Minute:
		return nil, fmt.Errorf("%w %v: want a minute or more (0: %v)", ErrInvalidRetention, retention, DefaultHistoryRetention)
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
				cfg.Replicas, cfg.Storage = bs.StreamInfo().Config.Replicas, bs.StreamInfo().Config.Storage
			}
		}
	}
	stream, err := js.CreateStream(ctx, cfg)
	if errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
		return OpenHistory(ctx, js, bucket)
	}
	if err != nil {
		return nil, fmt.Errorf("creating the history stream %s: %w", cfg.Name, err)
	}
	return &History{js: js, bucket: bucket, stream: stream}, nil
}

// OpenHistory opens the history stream of bucket; ErrNoHistory if there is
// none.
func OpenHistory(ctx context.Context, js jetstream.JetStream, bucket string) (*History, error) {
	if err := CheckBucketName(bucket); err != nil {
		return nil, err
	}
	stream, err := js.Stream(ctx, historyStream(bucket))
	switch {
	case errors.Is(err, jetstream.ErrStreamNotFound):
		return nil, fmt.Errorf("%w %q: create it with CreateHistory, or: election bucket create --bucket %s --history 7d", ErrNoHistory, bucket, bucket)
	case err != nil:
		return nil, fmt.Errorf("opening the history of bucket %q: %w", bucket, err)
	}
	return &History{js: js, bucket: bucket, stream: stream}, nil
}

// Retention returns how long the history keeps records.
func (h *History) Retention() time.Duration {
	return h.stream.CachedInfo().Config.MaxAge
}

// WithHistory makes the election record its wins and stand-downs in h, the
// history of its bucket. Records are sent in the background, in order, and
// retried until acknowledged or the election's Stop has waited a KV call's
// timeout for them; they never delay the election.
func WithHistory(h *History) Option {
	return func(o *options) { o.history = h }
}

// record sends ev, retrying with its message ID until it is acknowledged or
// ctx is done.
func (h *History) record(ctx context.Context, ev HistoryEvent, timeout time.Duration) error {
	data, err := json.Marshal(ev)
	if err != nil {
		return err
	}
	id := fmt.Sprintf("%s/%s/%d/%s", h.bucket, ev.Key, ev.Token, ev.Kind)
	for wait := 50 * time.Millisecond; ; wait = min(2*wait, time.Second) {
		opCtx, cancel := context.WithTimeout(ctx, timeout)
		_, err = h.js.Publish(opCtx, historySubject(h.bucket)+"."+ev.Key, data, jetstream.WithMsgID(id))
		cancel()
		if err == nil || !sleep(ctx, wait) {
			return err
		}
	}
}

// Events returns the recorded events of key ("": every key) since the given
// time (zero: all the history keeps), oldest first.
func (h *History) Events(ctx context.Context, key string, since time.Time) ([]HistoryEvent, error) {
	if key != "" {
		if err := CheckKey(key); err != nil {
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
	var events []HistoryEvent
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
			var ev HistoryEvent
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

// freedBy says how a key became free, from the entry a claim was made over
// (nil: none).
func freedBy(over jetstream.KeyValueEntry) string {
	switch {
	case over == nil:
		return "no key"
	case over.Operation() == jetstream.KeyValueDelete:
		return "deleted"
	case over.Operation() == jetstream.KeyValuePurge:
		return "purged"
	}
	value := string(over.Value())
	if name, ok := strings.CutPrefix(value, releasePrefix); ok {
		return "released by " + name
	}
	if to, ok := strings.CutPrefix(value, handoffPrefix); ok {
		return "handed over to " + to
	}
	return "taken over from " + value
}

// recorder sends an election's history events in order, in the
// background, until stop is called; stop then waits up to a KV call's
// timeout for the events still to send.
type recorder struct {
	events chan HistoryEvent
	cancel context.CancelFunc
	done   chan struct{}
}

// recorderBuffer bounds the events waiting to be sent; a leader records two
// per tenure, so it fills only when the history's server is unreachable for
// many tenures, and then the oldest are kept and the newest dropped.
const recorderBuffer = 64

func (c *campaigner) startRecorder() {
	h := c.opts.history
	if h == nil {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &recorder{events: make(chan HistoryEvent, recorderBuffer), cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(r.done)
		for ev := range r.events {
			if err := h.record(ctx, ev, c.timing.opTimeout); err != nil {
				c.log.Warn("could not record a leadership event in the history", "event", ev.Kind, "token", ev.Token, "error", err)
			}
		}
	}()
	c.recorder = r
}

// note queues ev for the history, if the election keeps one.
func (c *campaigner) note(ev HistoryEvent) {
	if c.recorder == nil {
		return
	}
	ev.Key, ev.Name = c.key, c.name
	select {
	case c.recorder.events <- ev:
	default:
		c.log.Warn("the history recorder is behind; dropped an event", "event", ev.Kind, "token", ev.Token)
	}
}

// stopRecorder sends what is queued, within a KV call's timeout.
func (c *campaigner) stopRecorder() {
	r := c.recorder
	if r == nil {
		return
	}
	close(r.events)
	defer r.cancel()
	select {
	case <-r.done:
	case <-time.After(c.timing.opTimeout):
		r.cancel()
		<-r.done
	}
}
