// Package history keeps a bucket's leadership history: who led each key,
// from when to when, and why leadership moved. An election records in it
// through its event hook (election.WithEventHook(h.Record)); anyone reads
// it with Events, and election history prints it.
//
// A History is also a run log for election.Election.Once
// (election.RecordRuns(h)): each run of a key is recorded there, with its
// host, start, duration, exit status and fencing token, and the done mark
// a successful run leaves lasts as long as election.DoneFor says, whatever
// the bucket's TTL (runs.go).
//
// What the history can miss:
//
//   - A leader that crashes (SIGKILL, a machine lost) records no
//     stand-down; its successor's win says how the key became free ("no
//     key": it aged out).
//   - Records not yet acknowledged when the election stops are retried for
//     its KV call timeout (the campaign interval, 5 s at most), then
//     dropped: a leader cut off from the servers right after winning, and
//     stopped or killed before it reconnects, leaves neither its win nor
//     its stand-down, and its successor's win says "no key".
//   - A recorder 64 records behind (the servers unreachable for many
//     tenures while the elections go on) drops the newer records.
//   - A process that may not publish to the history records nothing (it
//     logs one warning).
//   - A record retried for longer than the stream's duplicate window (2
//     minutes) after a lost acknowledgement can be stored twice.
//   - Outside Linux, a leader whose machine was suspended past its
//     validity has its stand-down dated when it resumed, which can be after
//     its successor's win: the history cannot tell how long the machine
//     slept there. On Linux it counts the sleep (CLOCK_BOOTTIME) and dates
//     the stand-down to the validity deadline, flagged late, as for a
//     paused leader.
package history

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/kvelect/election"
	"github.com/kvelect/election/internal/natscause"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// A bucket's leadership history is a JetStream stream of its own,
// KVELECT_HISTORY_<bucket>, on the subjects kvelect.history.<bucket>.<key>:
// every election whose event hook is History.Record records there, once
// each, the moment it announces leadership (with how the key became free)
// and the moment it stands down (with the cause). Each record carries a
// message ID made of the bucket, key, fencing token and event, so that a
// record sent again after a lost acknowledgement is stored once (within the
// stream's duplicate window), and how long after the event it was sent, by
// the recording process's monotonic clock plus the time its machine was
// suspended meanwhile (on Linux; see History.clock): the event's time is
// the server's stamp less that delay, so that a record sent late (the
// process was paused, suspended or cut off) is placed when its event
// happened. A leader whose validity deadline passed before it noticed (it
// was paused or suspended, or its process starved) stood down at that
// deadline, by the library's rule, and is recorded so.
// The stream keeps records for its retention, whatever happens to the
// processes that wrote them.

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
	// RunStarted and Ran (runs.go) are the records of Once's runs.
)

// Event is one record of a bucket's leadership history.
type Event struct {
	Key   string `json:"key"`
	Name  string `json:"name"`  // the candidate
	Kind  string `json:"kind"`  // Won, StoodDown, RunStarted or Ran
	Token uint64 `json:"token"` // the leadership's fencing token
	// After says, for a win, how the key became free, as the election's
	// EventWon says it (election.Event.After): "no key", "released by
	// NAME", "deleted" and so on.
	After string `json:"after,omitempty"`
	// Cause says, for a stand-down, why (an error's text; see OnLost).
	Cause string `json:"cause,omitempty"`
	// Delay is how long after the event the record was sent, by the
	// recording process's clock, which counts a suspend of its machine on
	// Linux: next to nothing for one sent at once.
	Delay time.Duration `json:"delay_ns,omitempty"`
	// Late says the record was sent a second or more after the event: the
	// process was paused, suspended or cut off from the servers, and At
	// rests on its clock over Delay.
	Late bool `json:"late,omitempty"`
	// At is when the event happened, by the server's clock: when the
	// record was stored, less Delay, and no earlier than the event recorded
	// before it by the same election (whose record was sent first), nor,
	// for a win over a release or a handoff, than the stand-down of the
	// key's tenure before it (which came first).
	At time.Time `json:"-"`
	// Recorded is when the record was stored, by the server's clock.
	Recorded time.Time `json:"-"`
	// Seq is the record's sequence in the history's stream.
	Seq uint64 `json:"-"`

	// A run of election.Election.Once (Kind Ran; RunStarted has none of
	// these): how long the work ran (it ended at At, Delay before the
	// record was stored), its exit status (0: it returned nil) and error,
	// whether the leadership ended or Once was stopped before it returned,
	// and how long the done mark it leaves lasts from Recorded (0: none).
	Duration    time.Duration `json:"duration_ns,omitempty"`
	Status      int           `json:"status,omitempty"`
	Error       string        `json:"error,omitempty"`
	Interrupted bool          `json:"interrupted,omitempty"`
	DoneFor     time.Duration `json:"done_for_ns,omitempty"`
}

// Started is when a run (Kind Ran) began: Duration before it ended, at At.
func (ev Event) Started() time.Time { return ev.At.Add(-ev.Duration) }

// lateAfter is the delay past which a record is Late: far longer than a
// record waits behind the one before it, or than the round trip of any
// working deployment; shorter than the pauses and outages that matter.
const lateAfter = time.Second

// History is a bucket's leadership history stream.
type History struct {
	js     jetstream.JetStream
	bucket string
	stream jetstream.Stream
	log    *slog.Logger

	// now and suspended make the clock events are timed by (clock):
	// time.Now, whose monotonic reading stands still while the machine is
	// suspended, and how long the machine has been suspended
	// (election.Suspended), or a test's.
	now       func() time.Time
	suspended func() time.Duration

	mu        sync.Mutex
	recorders map[[2]string]*recorder // by key and candidate name
	failed    bool                    // a record could not be sent or was dropped
	ttl       time.Duration           // the bucket's TTL, once read (bucketTTL)
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
	h := &History{js: js, bucket: bucket, stream: stream, log: slog.New(slog.DiscardHandler), now: time.Now, suspended: func() time.Duration { return election.Suspended(context.Background()) }, recorders: map[[2]string]*recorder{}}
	for _, opt := range opts {
		opt(h)
	}
	return h
}

// clock reads the clock events are timed by: the monotonic clock, plus
// the time the machine has been suspended, so that a span that a suspend
// interrupts counts the sleep, as the servers' clocks and the bucket's TTL
// do.
func (h *History) clock() time.Time { return h.now().Add(h.suspended()) }

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

// record sends p's record, retrying with its message ID until it is
// acknowledged or ctx is done, each attempt within timeout; each failed
// attempt is a failure. Each attempt carries how long after the event it
// was sent, so that whichever one the server stores tells when its event
// happened.
func (h *History) record(ctx context.Context, p pending, timeout time.Duration) error {
	ev := p.rec
	id := fmt.Sprintf("%s/%s/%d/%s", h.bucket, ev.Key, ev.Token, ev.Kind)
	for wait := 50 * time.Millisecond; ; wait = min(2*wait, time.Second) {
		happened := p.happened(ctx, h)
		delay := max(h.clock().Sub(happened), 0)
		ev.Delay, ev.Late = delay, delay >= lateAfter
		data, err := json.Marshal(ev)
		if err != nil {
			return err
		}
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

// Events returns the recorded events of key ("": every key) that happened
// since the given time (zero: all the history keeps), oldest first by when
// they happened (At).
func (h *History) Events(ctx context.Context, key string, since time.Time) ([]Event, error) {
	if key != "" {
		if err := election.CheckKey(key); err != nil {
			return nil, err
		}
	}
	subjects := []string{historySubject(h.bucket) + ".>"}
	if key != "" {
		subjects = []string{historySubject(h.bucket) + "." + key, runSubject(h.bucket, key)}
	}
	cfg := jetstream.ConsumerConfig{
		FilterSubjects:    subjects,
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
	last := map[[2]string]time.Time{} // the At of each election's latest record
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
			ev.Recorded, ev.Seq = meta.Timestamp, meta.Sequence.Stream
			ev.At = meta.Timestamp.Add(-ev.Delay)
			// One election's records are sent in order: a shorter trip to
			// the server for the later one must not place it first. (The
			// records of Once's runs are sent apart from them.)
			if ev.Kind == Won || ev.Kind == StoodDown {
				if prev := last[[2]string{ev.Key, ev.Name}]; ev.At.Before(prev) {
					ev.At = prev
				}
				last[[2]string{ev.Key, ev.Name}] = ev.At
			}
			if ev.At.Before(since) {
				continue // recorded since, but happened before
			}
			events = append(events, ev)
		}
		if err := batch.Error(); err != nil {
			return nil, fmt.Errorf("reading the history of bucket %q: %w", h.bucket, err)
		}
		if got == 0 {
			break
		}
	}
	afterReleases(events)
	// A late record is stored after records of events that came after
	// its own. Of two records dated alike, the later tenure's comes last.
	slices.SortStableFunc(events, func(a, b Event) int { return cmp.Or(a.At.Compare(b.At), cmp.Compare(a.Token, b.Token)) })
	return events, nil
}

// afterReleases dates each win over a release, a handoff or a draining
// mark no earlier than the stand-down of the key's tenure before it. The
// old leader writes each of them only after it stood down, so the win came
// after the stand-down; but each record is dated by its own trip to the
// server, which can place the win a few milliseconds first. A win over no
// key, a removal, an expiry or a live holder's entry is left as dated:
// nothing orders it after the tenure before it but the clocks, and a
// history that shows it early shows what they say.
func afterReleases(events []Event) {
	var records []*Event
	for i := range events {
		if ev := &events[i]; ev.Kind == Won || ev.Kind == StoodDown {
			records = append(records, ev)
		}
	}
	// By key, then token; a tenure's own records stay in the order of At.
	slices.SortStableFunc(records, func(a, b *Event) int { return cmp.Or(strings.Compare(a.Key, b.Key), cmp.Compare(a.Token, b.Token)) })
	var before, current *Event // the stand-downs of the key's tenure before the current one, and of the current one
	var floor time.Time        // the At of the current tenure's latest record: its next comes no earlier
	for i, ev := range records {
		switch {
		case i == 0 || ev.Key != records[i-1].Key:
			before, current, floor = nil, nil, time.Time{}
		case ev.Token != records[i-1].Token:
			before, current, floor = current, nil, time.Time{}
		}
		if ev.Kind == Won && writtenAfterStandDown(ev.After) && before != nil && before.At.After(floor) {
			floor = before.At
		}
		if ev.At.Before(floor) {
			ev.At = floor
		}
		floor = ev.At
		if ev.Kind == StoodDown {
			current = ev
		}
	}
}

// writtenAfterStandDown reports whether after, a win's Event.After, names
// an entry the old leader wrote once it had stood down: a release, a
// handoff or a draining mark.
func writtenAfterStandDown(after string) bool {
	for _, prefix := range []string{"released by ", "handed over to ", "drained by "} {
		if strings.HasPrefix(after, prefix) {
			return true
		}
	}
	return false
}

// Record is an election's event hook (election.WithEventHook(h.Record))
// that records its wins and stand-downs in the history. Records are sent in
// the background, in order, and retried until acknowledged or, once the
// election has stopped, until its KV call timeout has passed (EventStopped
// waits for them that long); they never delay the election otherwise. One
// History records for any number of elections.
//
// A stand-down is recorded at the moment the leadership's validity ended
// when that came first: the election stood down only when it noticed, on
// resuming from a pause or a suspend (ErrSuspended), but IsLeader was
// false from its deadline on. The
// deadline is the one the election keeps: counted from the send time of
// the last renewal acknowledged before it (EventRenewed, less its round
// trip) or else from the win, and as long as election.TimingFor the
// bucket's TTL and the campaign interval (EventCampaigning) says.
func (h *History) Record(ev election.Event) {
	now := h.clock()
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
		r.interval = ev.Duration
	case election.EventWon:
		h.queue(ev, func(r *recorder) pending {
			// The claim (or the renewal that confirmed it) was sent before
			// the announcement: counting validity from here errs late by a
			// round trip at most.
			r.leading, r.base, r.renewal = true, now, nil
			return pending{rec: Event{Kind: Won, Token: ev.Token, After: ev.After}, at: now}
		})
	case election.EventRenewed:
		if ev.Err != nil {
			return
		}
		h.mu.Lock()
		defer h.mu.Unlock()
		if r := h.recorders[[2]string{ev.Key, ev.Name}]; r != nil && r.leading {
			// A renewal acknowledged after the deadline ends the leadership
			// at once (EventLost comes next): the one before it was in time.
			if r.renewal != nil {
				r.base = r.renewal.sent
			}
			r.renewal = &renewal{sent: now.Add(-ev.Duration), acked: now}
		}
	case election.EventLost:
		h.queue(ev, func(r *recorder) pending {
			p := pending{rec: Event{Kind: StoodDown, Token: ev.Token, Cause: ev.Err.Error()}, at: now}
			if r.leading {
				p.tenure = &tenure{base: r.base, renewal: r.renewal, interval: r.interval}
			}
			r.leading, r.renewal = false, nil
			return p
		})
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
// name, in order, in the background, until stop; and follows their
// leadership, to tell when its validity ended (h.mu guards what follows
// users).
type recorder struct {
	users    int // elections of the key and name campaigning
	events   chan pending
	cancel   context.CancelFunc
	done     chan struct{}
	interval time.Duration // the campaign interval (EventCampaigning)
	leading  bool          // between EventWon and EventLost
	// base is when the write that the validity counts from was sent, as
	// far as it is known to have moved the validity: the win, or the
	// renewal before renewal.
	base time.Time
	// renewal is the latest acknowledged renewal: it moved the validity
	// if it was acknowledged before base's validity ended.
	renewal *renewal
}

// renewal is an acknowledged renewal, timed by the recording process's
// clock.
type renewal struct{ sent, acked time.Time }

// tenure is what a stand-down's record knows of the leadership's validity.
type tenure struct {
	base     time.Time
	renewal  *renewal
	interval time.Duration
}

// pending is a record waiting to be sent: its event happened at at, by the
// recording process's clock, or, for a stand-down with tenure, at the end
// of the leadership's validity if that came first.
type pending struct {
	rec    Event
	at     time.Time
	tenure *tenure
}

// happened is when p's event happened: at, or the end of the validity of
// p's tenure if it came before at and the bucket's TTL can be read.
func (p pending) happened(ctx context.Context, h *History) time.Time {
	t := p.tenure
	if t == nil || p.at.Sub(t.base) <= t.interval {
		return p.at // within the interval after a renewal: the validity lasts longer
	}
	ttl, ok := h.bucketTTL(ctx)
	if !ok {
		return p.at
	}
	validity := election.TimingFor(ttl, t.interval).Validity
	base := t.base
	if t.renewal != nil && t.renewal.acked.Before(base.Add(validity)) {
		base = t.renewal.sent
	}
	if end := base.Add(validity); end.Before(p.at) {
		return end
	}
	return p.at
}

// bucketTTL returns the TTL of the history's bucket, read once from its
// stream; false if it cannot be read now.
func (h *History) bucketTTL(ctx context.Context) (time.Duration, bool) {
	h.mu.Lock()
	ttl := h.ttl
	h.mu.Unlock()
	if ttl > 0 {
		return ttl, true
	}
	ctx, cancel := context.WithTimeout(ctx, attemptTimeout)
	defer cancel()
	stream, err := h.js.Stream(ctx, "KV_"+h.bucket)
	if err != nil || stream.CachedInfo().Config.MaxAge <= 0 {
		h.log.Debug("cannot read the bucket's TTL: a stand-down is recorded when the leader noticed it, not when its validity ended",
			"bucket", h.bucket, "error", err)
		return 0, false
	}
	ttl = stream.CachedInfo().Config.MaxAge
	h.mu.Lock()
	h.ttl = ttl
	h.mu.Unlock()
	return ttl, true
}

// recorderBuffer bounds the records waiting to be sent; a leader records
// two per tenure, so it fills only when the history's server is
// unreachable for many tenures, and then the oldest are kept and the
// newest dropped.
const recorderBuffer = 64

// attemptTimeout bounds one attempt to send a record.
const attemptTimeout = 5 * time.Second

// startRecorder starts a recorder. It reads the bucket's TTL first, while
// the elections have just connected, for the stand-downs it may have to
// date back to a validity deadline.
func (h *History) startRecorder() *recorder {
	ctx, cancel := context.WithCancel(context.Background())
	r := &recorder{events: make(chan pending, recorderBuffer), cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(r.done)
		h.bucketTTL(ctx)
		for p := range r.events {
			if err := h.record(ctx, p, attemptTimeout); err != nil {
				h.failure("could not record a leadership event in the history", err, "key", p.rec.Key, "name", p.rec.Name, "event", p.rec.Kind, "token", p.rec.Token)
			}
		}
	}()
	return r
}

// queue queues the record that build returns for the election event ev;
// build runs with h.mu held, on the election's recorder.
func (h *History) queue(ev election.Event, build func(r *recorder) pending) {
	h.mu.Lock()
	defer h.mu.Unlock()
	r := h.recorders[[2]string{ev.Key, ev.Name}]
	if r == nil {
		return // an election that did not announce its campaign to this hook
	}
	p := build(r)
	p.rec.Key, p.rec.Name = ev.Key, ev.Name
	select {
	case r.events <- p:
	default:
		h.failureLocked("the history recorder is behind; dropped an event", nil, "key", ev.Key, "name", ev.Name, "event", p.rec.Kind, "token", p.rec.Token)
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
