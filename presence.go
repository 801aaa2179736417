package election

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"maps"
	"math"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Every running election keeps a record of its candidacy in the bucket
// (its key and value: wire.go), so that any process can tell who campaigns
// for a key. The record is written when the election starts, written again
// every third of a TTL, and deleted when it stops; a crashed candidate's
// record is live until a TTL after its last write. Records carry no
// authority: the election itself never depends on them, only what is read
// from them (Candidates, and a transfer's check that its target campaigns).
const (
	// presenceRefreshes is how many times per TTL a record is rewritten,
	// so that one late write does not make a live candidate look gone.
	presenceRefreshes = 3
)

// Candidate is an election's candidate as the bucket's watcher sees it.
type Candidate struct {
	Key      string
	Name     string
	Priority int // see WithPriority
	// Since is when the candidate began campaigning, by its own clock.
	Since time.Time
	// Metadata is what the candidate published with WithMetadata.
	Metadata map[string]string
	// RoundTrip is the median of the candidate's recent round trips to the
	// bucket's stream leader (its last 16 KV calls that the server
	// answered; timeouts measure nothing), as of its latest
	// record: a candidate in another region than the bucket shows it. 0
	// before it measured any.
	RoundTrip time.Duration
	// Writer is the election that writes the record: its host, process
	// and connection.
	Writer Writer
	// ClockRate is the candidate's clock's rate against the stream
	// leader's as it last measured it (ClockCheck.Rate: 1 when they
	// agree), as of its latest record; 0 before it measured any.
	ClockRate float64
	// Unhealthy says why the candidate's health check (WithHealthCheck)
	// keeps it from claiming the key, as of its latest record: how many
	// checks in a row failed and the latest one's error, or that its first
	// check has not returned yet. It is empty while the check passes, and
	// without one.
	Unhealthy string
}

// candidate is the candidate r records for electionKey.
// Its Metadata is the caller's own copy: the record is the watcher's,
// parsed once and read by every caller.
func (r *candidateRecord) candidate(electionKey string) Candidate {
	rtt := time.Duration(r.RoundTripMS * float64(time.Millisecond))
	return Candidate{Key: electionKey, Name: r.Name, Priority: r.Priority, Since: r.Since, Metadata: maps.Clone(r.Metadata), RoundTrip: rtt, Writer: r.Writer, ClockRate: r.ClockRate, Unhealthy: r.Unhealthy}
}

// maxMetadata bounds the size of a candidate's metadata, keys and values
// together: the record is rewritten every third of a TTL.
const maxMetadata = 64 << 10

// WithMetadata publishes metadata with the candidate's record, for every
// process to read with Bucket.Candidates: a node's labels, capacity,
// version, what it can run. At most 64 KiB, keys and values together; the
// map is copied.
func WithMetadata(metadata map[string]string) Option {
	copied := make(map[string]string, len(metadata))
	for k, v := range metadata {
		copied[k] = v
	}
	return func(o *options) { o.metadata = copied }
}

// checkMetadata says what is wrong with metadata for a candidate whose
// record is on (or off, noPresence).
func checkMetadata(metadata map[string]string, noPresence bool) error {
	size := 0
	for k, v := range metadata {
		if k == "" {
			return fmt.Errorf("%w: metadata with an empty key", ErrInvalidArgument)
		}
		size += len(k) + len(v)
	}
	switch {
	case size > maxMetadata:
		return fmt.Errorf("%w: metadata of %d bytes, want at most %d", ErrInvalidArgument, size, maxMetadata)
	case len(metadata) > 0 && noPresence:
		return fmt.Errorf("%w: metadata travels in the candidate record, which WithoutPresence turns off", ErrInvalidArgument)
	}
	return nil
}

// SetMetadata replaces the metadata the candidate publishes (see
// WithMetadata), within the same limits: a running election rewrites its
// record at once, so that Bucket.Candidates in every process reads the new
// metadata after one round trip. It is for what changes while the election
// runs: a state, a load, what the leader is doing.
func (e *Election) SetMetadata(metadata map[string]string) error {
	if err := checkMetadata(metadata, e.opts.noPresence); err != nil {
		return err
	}
	copied := make(map[string]string, len(metadata))
	for k, v := range metadata {
		copied[k] = v
	}
	e.mu.Lock()
	e.metadata = copied
	e.mu.Unlock()
	select {
	case e.republish <- struct{}{}:
	default:
	}
	return nil
}

// Candidates returns the live candidates of key: the elections for it that
// run (in any process), once the bucket's watcher has read the bucket (ctx
// bounds that wait). A candidate that stopped is gone at once; one that
// crashed or was cut off is gone a TTL after its last write.
func (b *Bucket) Candidates(ctx context.Context, key string) ([]Candidate, error) {
	if err := CheckKey(key); err != nil {
		return nil, err
	}
	if err := b.awaitReady(ctx); err != nil {
		return nil, err
	}
	return b.watcher.candidates(key, b.info.ttl), nil
}

// AllCandidates returns the live candidates of every key of the bucket, by
// key, as Candidates does for one.
func (b *Bucket) AllCandidates(ctx context.Context) (map[string][]Candidate, error) {
	if err := b.awaitReady(ctx); err != nil {
		return nil, err
	}
	byKey := map[string][]Candidate{}
	for _, c := range b.watcher.candidates("", b.info.ttl) {
		byKey[c.Key] = append(byKey[c.Key], c)
	}
	return byKey, nil
}

// Writer identifies the run of an election that writes a candidate
// record: the process and, when the election was given it
// (WithConnection), the NATS connection.
type Writer struct {
	// Instance is drawn at random for each Election: it tells apart two
	// elections of one name even in one process.
	Instance string `json:"instance"`
	Host     string `json:"host,omitempty"`
	PID      int    `json:"pid,omitempty"`
	// Connection is the connection's name (nats.Name), Client the id the
	// server gave it, and Server the server it is on (its name, or its URL
	// when it has none), as of the record's latest write.
	Connection string `json:"connection,omitempty"`
	Client     uint64 `json:"client,omitempty"`
	Server     string `json:"server,omitempty"`
}

// String describes the writer on one line, such as
// `web-1 pid 4242 (connection "election run web-1", client 7, on server n1, instance 5f0c2a9e41d7)`.
func (w Writer) String() string {
	if w.Instance == "" {
		return "an unnamed writer (a kvelect that does not name the writers of its records)"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s pid %d (", cmp.Or(w.Host, "an unknown host"), w.PID)
	if w.Connection != "" {
		fmt.Fprintf(&b, "connection %q, ", w.Connection)
	}
	if w.Client != 0 {
		fmt.Fprintf(&b, "client %d, ", w.Client)
	}
	if w.Server != "" {
		fmt.Fprintf(&b, "on server %s, ", w.Server)
	}
	fmt.Fprintf(&b, "instance %s)", w.Instance)
	return b.String()
}

// thisProcess is the host name and pid every record of this process gives.
var thisProcess = sync.OnceValue(func() Writer {
	host, _ := os.Hostname()
	return Writer{Host: host, PID: os.Getpid()}
})

// newWriter returns a writer for a new Election of this process.
func newWriter() Writer {
	w := thisProcess()
	var id [6]byte
	_, _ = rand.Read(id[:]) // never fails (crypto/rand)
	w.Instance = hex.EncodeToString(id[:])
	return w
}

// Instance is the random id that tells this Election's candidate record
// apart from the record of another election of the same name: the
// Writer.Instance of the records it writes.
func (e *Election) Instance() string { return e.presence.writer.Instance }

// WithConnection names nc, the connection the bucket was opened on, in the
// election's candidate record, beside its host and process: the
// connection's name, its client id and the server it is on, read at each
// write. A second candidate refused because its name is taken
// (ErrDuplicateName) then learns which connection holds the name. Give it
// to OpenBucket to name the connection in every election of the bucket.
func WithConnection(nc *nats.Conn) Option {
	return func(o *options) { o.conn = nc }
}

// presence is an election's hold on its candidate record. The election
// writes its record only by compare-and-set: the first write over no
// record (or a delete of one), each later one over its own latest
// revision, and its delete, when it stops, over that revision too. So it never writes over the record of
// another election of its name, nor deletes one, and a refused write tells
// it that its name may be taken.
//
// Names must be unique per key: they identify candidates to transfers, the
// history, status and a fleet's placement. A record in the way when an
// election starts is either another live election's, which keeps
// rewriting it every third of a TTL, or one left by an election that
// crashed, which no one rewrites and which ages out a TTL after its last
// write. Start waits to tell which (runUnique): it is refused with a
// *DuplicateError as soon as one run writes the record twice after it was
// found (a run that died may have had one write on the wire, which lands
// late; a live one rewrites every third of a TTL, so the refusal comes
// within about two thirds of a TTL), and campaigns as soon as the record
// is gone. An election running WithoutPresence writes no record, so its
// name is not checked.
type presence struct {
	writer Writer // this election: its instance, host and pid

	settled chan struct{} // closed once Start may campaign, or must not
	settle  sync.Once

	// taken is done, and refusal set, once another live run turned out to
	// hold the name.
	taken    context.Context
	markTake context.CancelFunc
	mu       sync.Mutex
	refusal  *DuplicateError
}

func newPresence() *presence {
	taken, mark := context.WithCancel(context.Background())
	return &presence{writer: newWriter(), settled: make(chan struct{}), taken: taken, markTake: mark}
}

// open lets Start campaign (or learn that it must not).
func (p *presence) open() { p.settle.Do(func() { close(p.settled) }) }

// isOpen reports whether open was called.
func (p *presence) isOpen() bool {
	select {
	case <-p.settled:
		return true
	default:
		return false
	}
}

// refused returns the *DuplicateError once the name turned out taken, and
// nil until then.
func (p *presence) refused() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.refusal == nil {
		return nil
	}
	return p.refusal
}

// takenBy records that another live run holds the name, as err says.
func (p *presence) takenBy(err *DuplicateError) {
	p.mu.Lock()
	p.refusal = err
	p.mu.Unlock()
	p.markTake()
	p.open()
}

// writerNow is this election as its record names it now: with the
// connection's client id and server, which change when it reconnects.
func (c *campaigner) writerNow() Writer {
	w := c.e.presence.writer
	if nc := c.e.opts.conn; nc != nil {
		w.Connection = nc.Opts.Name
		if id, err := nc.GetClientID(); err == nil {
			w.Client = id
		}
		w.Server = cmp.Or(nc.ConnectedServerName(), nc.ConnectedUrlRedacted())
	}
	return w
}

// runUnique is Start's campaign: it begins once present has written the
// record (or cannot tell, and has waited enough), and ends as soon as the
// name turns out taken, returning the *DuplicateError then. An election
// WithoutPresence campaigns at once.
func (c *campaigner) runUnique(ctx context.Context) error {
	if c.e.opts.noPresence {
		c.run(ctx)
		return nil
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(c.e.presence.taken, cancel)
	defer stop()
	select {
	case <-c.e.presence.settled:
	case <-ctx.Done():
	}
	if err := c.e.presence.refused(); err != nil {
		c.e.log.Error("refused: another live election runs under this name for this key", "error", err)
		return err
	}
	if ctx.Err() != nil {
		return nil
	}
	c.run(ctx)
	if err := c.e.presence.refused(); err != nil {
		c.e.log.Error("stopped: another live election runs under this name for this key", "error", err)
		return err
	}
	return nil
}

// heldRecord is another run's record, found in the way before this
// election wrote its own.
type heldRecord struct {
	by       Writer
	revision uint64    // its latest revision the watcher showed
	seen     time.Time // when the watcher delivered that revision
	tries    int       // writes tried since it could have aged out
	// rewrites counts the writes of by seen above the revision first
	// found. A run has at most one record write in flight, so one
	// rewrite may be the last write of a run that died with it on the
	// wire; a live run rewrites every third of a TTL, so a second one
	// comes within two thirds of a TTL and tells that the run is live.
	rewrites int
}

// rewritten takes in a write of the record by w at revision, seen at now,
// and reports whether it shows a live run: the second write of one run
// seen after the record was found.
func (h *heldRecord) rewritten(w Writer, revision uint64, now time.Time) bool {
	if w.Instance != h.by.Instance {
		h.by, h.rewrites = w, 0
	}
	h.rewrites++
	h.revision, h.seen, h.tries = revision, now, 0
	return h.rewrites >= 2
}

// present keeps this election's candidate record in the bucket until ctx
// is done, then deletes it, as presence describes. What the record holds
// now is read from the watcher (a candidate may write the bucket's keys
// but need not read them), and each write is a compare-and-set over what
// it read. A failed write is logged and tried again at the next refresh:
// the record informs others, and the election does not depend on it.
func (c *campaigner) present(ctx context.Context) {
	p := c.e.presence
	since := c.e.now().UTC()
	key := candidateKey(c.e.key, c.e.name)
	// The watcher's news of the record matters only while another run's is
	// in the way or a write was refused: a subscription costs the watcher
	// a look at each entry it delivers, so there is one only then.
	var own *subscription
	watch := func() {
		if own == nil {
			own = c.watcher.subscribe(key)
		}
	}
	defer func() {
		if own != nil {
			c.watcher.unsubscribe(own)
		}
	}()
	tick := time.NewTicker(c.e.clock.Real(c.e.timing.ttl / presenceRefreshes))
	defer tick.Stop()
	retry := time.NewTimer(time.Hour)
	defer retry.Stop()
	gate := time.NewTimer(c.e.clock.Real(c.nameWait()))
	defer gate.Stop()
	var (
		rev      uint64      // this election's latest revision of the record; 0: none
		in       *heldRecord // another run's record in the way
		overNone bool        // a write was refused and the watcher does not show why: try over no record
		due      = true      // a write is due
	)
	for {
		view := c.watcher.view(key)
		e := view.latest
		if by, ok := c.othersRecord(view); ok {
			// Another run wrote the record over this election's, or twice
			// more while this one waited: it is live.
			overOurs := rev != 0 && e.Revision() > rev
			again := in != nil && e.Revision() > in.revision && in.rewritten(by, e.Revision(), c.e.now())
			switch {
			case overOurs || again:
				p.takenBy(&DuplicateError{Key: c.e.key, Name: c.e.name, Running: by, Refused: c.writerNow()})
				c.e.log.Warn("the candidate record is another live election's: this one is not listed", "running", by.String())
				return
			case rev == 0 && in == nil:
				// It ages out a TTL after its last write, which came
				// before the watcher delivered it: found by a run that
				// started long after, it may have aged out already.
				watch()
				in = &heldRecord{by: by, revision: e.Revision(), seen: view.seenAt}
				if c.e.now().Before(in.seen.Add(c.e.timing.ttl)) {
					c.e.log.Warn("the candidate record of this name is another run's: waiting for it to age out (its writer crashed) or be written again (a live duplicate: refused)",
						"held_by", by.String(), "wait_at_most", c.nameWait())
				}
			}
		} else if in != nil {
			in = nil // gone: deleted, purged, aged out, or written over by this election
			due = true
		}
		if ours := c.ownRevision(view); ours > rev {
			rev = ours // a write of this election whose answer was lost
		}

		if due && ctx.Err() == nil && (in == nil || !c.e.now().Before(in.seen.Add(c.e.timing.ttl))) {
			due = false
			over := rev
			switch {
			case in != nil || overNone:
				over = 0 // succeeds only once no record is left
			case e != nil && e.Operation() != jetstream.KeyValuePut && e.Revision() > rev:
				over = e.Revision() // a delete or purge: written anew over it
			}
			written, err := c.writeRecord(ctx, key, since, over)
			switch {
			case err == nil:
				rev, in, overNone = written, nil, false
				p.open()
				if own != nil {
					c.watcher.unsubscribe(own)
					own = nil
				}
			case isCASConflict(err):
				overNone = !overNone && over != 0 // the watcher will show why, or there is no record
				watch()
				if v := c.watcher.view(key).latest; v != nil && (e == nil || v.Revision() != e.Revision()) {
					due = true
					continue // the watcher showed why before this election listened
				}
			case ctx.Err() == nil:
				c.e.log.Warn("writing the candidate record", errAttrs(err)...)
				if in == nil {
					p.open() // the name cannot be checked now: campaign, and check at the next refresh
				}
			}
		}

		var changed <-chan struct{}
		if own != nil {
			changed = own.changed
		}
		if in != nil {
			retry.Reset(c.e.wait(c.retryRecordAt(in)))
		}
		select {
		case <-ctx.Done():
			c.deleteRecord(key, max(rev, c.ownRevision(c.watcher.view(key))))
			return
		case <-tick.C:
			due = true
		case <-c.e.republish:
			due = true
		case <-retry.C:
			due = true
		case <-changed:
			if v := c.watcher.view(key).latest; v != nil && v.Revision() != rev {
				due = true // news of another writer, or of a write of this election's lost answer
			}
		case <-gate.C:
			if in != nil && !p.isOpen() {
				c.e.log.Warn("the record in the way neither aged out nor was written again; campaigning, and checking the name at each refresh", "held_by", in.by.String())
			}
			p.open()
		}
		retry.Stop()
	}
}

// othersRecord returns the writer of the view's latest entry if it is a
// candidate record written by another run than this election.
func (c *campaigner) othersRecord(v keyView) (Writer, bool) {
	if v.latest == nil || v.latest.Operation() != jetstream.KeyValuePut {
		return Writer{}, false
	}
	w := v.writer()
	return w, w.Instance != c.e.presence.writer.Instance
}

// ownRevision returns the revision of the view's latest entry if it is a
// candidate record this election wrote, and 0 otherwise.
func (c *campaigner) ownRevision(v keyView) uint64 {
	if v.latest == nil || v.latest.Operation() != jetstream.KeyValuePut || v.writer().Instance != c.e.presence.writer.Instance {
		return 0
	}
	return v.latest.Revision()
}

// nameWait is the longest Start waits for the name to be checked: a record
// in the way has aged out a TTL after it was found, which was after its
// last write, and a third of a TTL more covers the server's expiry lag.
// Past it, the election campaigns anyway and goes on checking.
func (c *campaigner) nameWait() time.Duration {
	return c.e.timing.ttl + c.e.timing.ttl/presenceRefreshes
}

// retryRecordAt is when to try to write the record again while another
// run's is in the way: once it can have aged out (a TTL after it was
// found), then every firstRetry, doubling up to a third of a TTL, as the
// server removes it up to its expiry lag late (and the watcher may not
// say so: a key that ages out leaves no trace on a bucket without expiry
// markers).
func (c *campaigner) retryRecordAt(in *heldRecord) time.Time {
	now := c.e.now()
	expiry := in.seen.Add(c.e.timing.ttl)
	if now.Before(expiry) {
		return expiry
	}
	in.tries++
	return now.Add(min(firstRetry<<min(in.tries-1, 16), c.e.timing.ttl/presenceRefreshes))
}

// writeRecord writes the record by compare-and-set over revision over (0:
// over no record at all) and returns the revision written. A write in
// flight when ctx is done is let finish (within opTimeout), so that the
// delete that follows is made over the revision it wrote: cancelled, its
// answer would be lost and the delete refused, leaving a stopped
// candidate's record live for a TTL.
func (c *campaigner) writeRecord(ctx context.Context, key string, since time.Time, over uint64) (uint64, error) {
	c.e.mu.Lock()
	metadata := c.e.metadata
	c.e.mu.Unlock()
	rtt := float64(c.rtt.median().Round(time.Microsecond)) / float64(time.Millisecond) // to the microsecond: no float noise in the record
	rate := math.Round(math.Float64frombits(c.clockRate.Load())*1e6) / 1e6             // no float noise in the record
	value, err := recordValue(candidateRecord{Name: c.e.name, Priority: c.e.opts.priority, Since: since, Metadata: metadata, RoundTripMS: rtt, Writer: c.writerNow(), ClockRate: rate, Unhealthy: c.health.unhealthy()})
	if err != nil {
		return 0, fmt.Errorf("encoding the candidate record: %w", err)
	}
	opCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.e.timing.opTimeout)
	defer cancel()
	sent := c.e.now()
	rev, err := c.kv.Update(opCtx, key, value, over)
	c.roundTrip(sent, err)
	return rev, err
}

// deleteRecord deletes the record if it is still this election's latest
// write, rev (0: none): another run's record is left as it is.
func (c *campaigner) deleteRecord(key string, rev uint64) {
	if rev == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.e.timing.opTimeout)
	defer cancel()
	err := c.kv.Delete(ctx, key, jetstream.LastRevision(rev))
	if err != nil && !isCASConflict(err) {
		c.e.log.Warn("deleting the candidate record", "error", err)
	}
}
