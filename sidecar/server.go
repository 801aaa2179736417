package sidecar

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/kvelect/election"
)

// Server follows one key's leadership, as its own election and the
// bucket's watcher report it, and serves it over HTTP (Handler).
type Server struct {
	key, self  string
	bucket     *election.Bucket
	election   *election.Election
	connected  func() bool // whether the NATS connection is up
	leaderFile *LeaderFile // or nil
	whileLead  func(leading context.Context)
	tolerance  time.Duration // of Election.CheckHealth
	log        *slog.Logger

	mu sync.Mutex
	// watching is closed when the watcher has first reported the key's
	// holder: until then the sidecar cannot say who leads.
	watching chan struct{}
	holder   election.Leader // the key's holder, as the watcher last reported it
	// holderSince is when holder's claim reached the server, by the
	// server's clock, and holderToken that claim's revision; zero unless
	// the watcher delivered
	// the claim itself (election.Leader.Claimed): a holder that held the
	// key when the sidecar started watching, or first seen by a renewal
	// after the sidecar lagged, has them unknown.
	holderSince time.Time
	holderToken uint64
	leading     bool            // between this instance's OnWon and the end of its leadership
	token       uint64          // while leading, its fencing token
	wonAt       time.Time       // while leading, when it began
	leadCtx     context.Context // while leading, its leadership context (for election.WorkDeadline)
	last        Leadership
	streams     map[chan Leadership]struct{} // the /events clients
	closed      bool

	// workMargin is the election's Timing.WorkMargin: its work deadline
	// less this is its validity deadline, where a lease ends.
	workMargin time.Duration
	// renewed receives, from the election's event hook, the work deadline
	// that held when a renewal was acknowledged; refreshLeases sends every
	// stream a fresh lease once the deadline has moved past it.
	renewed chan time.Time
}

// Leadership is the key's leadership as the server answers it: the JSON of
// /leader, /self and each event of /events.
type Leadership struct {
	Key string `json:"key"` // the election key
	// Name is the leader: this instance while it leads, else the key's
	// holder as the watcher sees it; "" when nobody leads, and when this
	// instance holds the key without leading (it waits to announce, or its
	// leadership has just ended).
	Name string `json:"name"`
	// Token is the leader's fencing token: exact when this instance leads,
	// else the revision at which the sidecar saw the leader claim the key;
	// null when it did not see the claim (the leader led before the
	// sidecar started watching, or claimed while the sidecar lagged).
	Token *uint64 `json:"token"`
	// Since is when this instance began leading, or when the leader's
	// claim reached the server, by the server's clock; null when the
	// sidecar did not see the claim.
	Since *time.Time `json:"since"`
	// Renewed is when the leader's latest write (its claim or a renewal)
	// reached the server, by the server's clock.
	Renewed  *time.Time `json:"renewed"`
	IsLeader bool       `json:"is_leader"` // whether this instance leads
	Self     string     `json:"self"`      // this instance's name
	At       time.Time  `json:"at"`        // when the sidecar made this answer
	// LeaseMS is how many milliseconds the application may act as leader
	// after it receives this answer, without hearing from the sidecar
	// again: the time left until this instance's validity deadline, when
	// /self turns 503, counted when the answer is written. 0 when this
	// instance does not lead: the validity deadline less the time since, on
	// this host's monotonic clock. The application counts it from when it
	// receives the answer; the delivery, its own polling and the unit of
	// work it is in come out of the work margin that follows the validity
	// deadline (election.Timing.WorkMargin: 116 ms at a 2 s TTL, 723 ms at
	// 10 s), before another candidate can lead.
	LeaseMS int64 `json:"lease_ms"`
}

// sameLeader reports whether a and b show the same leadership: the same
// leader, token and role of this instance.
func sameLeader(a, b Leadership) bool {
	return a.Name == b.Name && a.IsLeader == b.IsLeader && (a.Token == nil) == (b.Token == nil) && (a.Token == nil || *a.Token == *b.Token)
}

// streamBuffer bounds the events queued for one /events client; a client
// further behind is disconnected, and gets the current state first when it
// reconnects, rather than a stream with changes missing.
const streamBuffer = 64

// keepAlive is how often an idle event stream carries a comment, so that
// both ends notice a dead connection.
const keepAlive = 15 * time.Second

// Config is how a Server runs; every field may be left zero.
type Config struct {
	// Connected reports whether the NATS connection is up, for /healthz
	// (nats.Conn.IsConnected); nil: always.
	Connected func() bool
	// LeaderFile is held while this instance leads; nil: none.
	LeaderFile *LeaderFile
	// HealthTolerance is /healthz's tolerance of a late renewal
	// (election.Election.CheckHealth).
	HealthTolerance time.Duration
	// Logger logs the leaderships' starts; nil: slog.Default().
	Logger *slog.Logger
	// WhileLeading, if set, runs during each leadership of this instance,
	// from when /self answers 200, with the leadership context; it returns
	// once that context is done and what it started has stopped (within
	// election.WorkDeadline), before the key is released: an
	// endpoint.Endpoint's Serve, say. /self, /leader and the event streams
	// say this instance no longer leads as soon as the context is done,
	// while what WhileLeading started drains.
	WhileLeading func(leading context.Context)
}

// New returns the server of the key of b for the candidate name, and makes
// its election: b.NewElection(name, key, opts...) with the server's
// election.OnWon (it replaces one among opts) and its event hook added.
// The caller starts the election (Election().Start), runs Follow while it
// runs, and calls Close once it has returned, before it shuts the HTTP
// server down.
func New(b *election.Bucket, name, key string, cfg Config, opts ...election.Option) (*Server, error) {
	connected := cfg.Connected
	if connected == nil {
		connected = func() bool { return true }
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	s := &Server{
		key: key, self: name, bucket: b, connected: connected, leaderFile: cfg.LeaderFile, whileLead: cfg.WhileLeading,
		tolerance: cfg.HealthTolerance, log: log,
		watching:   make(chan struct{}),
		streams:    map[chan Leadership]struct{}{},
		workMargin: election.TimingFor(b.TTL(), 0).WorkMargin(),
		renewed:    make(chan time.Time, 1),
	}
	s.last = s.viewLocked(false, time.Now())
	e, err := b.NewElection(name, key, append(opts[:len(opts):len(opts)], election.OnWon(s.lead), election.WithEventHook(s.onEvent))...)
	if err != nil {
		return nil, err
	}
	s.election = e
	return s, nil
}

// Election is the server's election.
func (s *Server) Election() *election.Election { return s.election }

// Follow starts to watch the key, and returns: from then on it sends every
// event stream each change, and a fresh lease after each renewal, until
// ctx is done; done is closed once it has stopped.
func (s *Server) Follow(ctx context.Context) (done <-chan struct{}, err error) {
	changes, err := s.bucket.Observe(ctx, s.key)
	if err != nil {
		return nil, err
	}
	followed := make(chan struct{})
	go func() {
		defer close(followed)
		refreshed := make(chan struct{})
		go func() {
			defer close(refreshed)
			s.refreshLeases(ctx.Done())
		}()
		s.follow(changes)
		<-refreshed
	}()
	return followed, nil
}

// lead is the election's OnWon: it writes the leader file and shows this
// instance as leader until leadership ends, running Config.WhileLeading
// meanwhile. As soon as leadership ends it shows it no longer (the event
// streams hear it while WhileLeading's work still drains) and removes the
// file; it returns once WhileLeading has: the key is released only after.
func (s *Server) lead(leading context.Context) {
	token, _ := election.TokenFromContext(leading)
	var drop func()
	if s.leaderFile != nil {
		drop = s.leaderFile.Hold(leading, token) // before /self can answer 200
	}
	s.mu.Lock()
	s.leading, s.token, s.wonAt, s.leadCtx = true, token, time.Now(), leading
	s.publishLocked()
	s.mu.Unlock()
	s.log.Info("leading: /self answers 200", "token", token)

	drained := make(chan struct{})
	go func() {
		defer close(drained)
		if s.whileLead != nil {
			s.whileLead(leading)
		}
	}()
	<-leading.Done()
	s.mu.Lock()
	s.leading, s.token, s.wonAt, s.leadCtx = false, 0, time.Time{}, nil
	s.publishLocked()
	s.mu.Unlock()
	if drop != nil {
		drop()
	}
	<-drained
}

// follow records each holder of the key the watcher reports, until changes
// is closed; the first is the holder when the watcher read the bucket.
func (s *Server) follow(changes <-chan election.Leader) {
	first := true
	for l := range changes {
		s.observed(l, first)
		first = false
	}
}

// observed records l, the key's holder.
func (s *Server) observed(l election.Leader, first bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case first:
		s.holder, s.holderSince, s.holderToken = l, time.Time{}, 0
		close(s.watching)
	case l.Name != s.holder.Name && l.Claimed:
		s.holder, s.holderSince, s.holderToken = l, l.Written, l.Revision
	case l.Name != s.holder.Name:
		s.holder, s.holderSince, s.holderToken = l, time.Time{}, 0
	default:
		s.holder = l // the same holder, seen again: its claim is what it was
	}
	s.publishLocked()
}

// viewLocked is the leadership at now, with this instance leading or not.
func (s *Server) viewLocked(leading bool, now time.Time) Leadership {
	v := Leadership{Key: s.key, Self: s.self, At: now.UTC()}
	switch {
	case leading:
		token, since := s.token, s.wonAt.UTC()
		v.Name, v.IsLeader, v.Token, v.Since = s.self, true, &token, &since
	case s.holder.Name == "" || s.holder.Name == s.self:
		// Nobody leads, or this instance holds the key but does not
		// lead: only its own election can say it leads.
	default:
		v.Name = s.holder.Name
		if s.holderToken != 0 {
			token := s.holderToken
			v.Token = &token
		}
		if !s.holderSince.IsZero() {
			since := s.holderSince.UTC()
			v.Since = &since
		}
	}
	if v.Name != "" && v.Name == s.holder.Name {
		renewed := s.holder.Written.UTC()
		v.Renewed = &renewed
	}
	return v
}

// publishLocked sends the leadership to the event streams if it changed.
func (s *Server) publishLocked() {
	v := s.viewLocked(s.leading, time.Now())
	if sameLeader(v, s.last) {
		return
	}
	s.sendLocked(v)
}

// sendLocked sends v to the event streams, disconnecting any that is
// streamBuffer events behind.
func (s *Server) sendLocked(v Leadership) {
	s.last = v
	for stream := range s.streams {
		select {
		case stream <- v:
		default:
			close(stream)
			delete(s.streams, stream)
		}
	}
}

// now returns the leadership this moment, or false before the watcher has
// reported the key. This instance leads only while its election says so:
// IsLeader turns false at its validity deadline, even before OnWon's
// context is cancelled. Renewed is read from the watcher, fresher than the
// last change.
func (s *Server) now(ctx context.Context) (Leadership, bool) {
	select {
	case <-s.watching:
	default:
		return Leadership{}, false
	}
	isLeader := s.election.IsLeader()
	s.mu.Lock()
	v := s.viewLocked(s.leading && isLeader, time.Now())
	s.mu.Unlock()
	if l, err := s.bucket.Leader(ctx, s.key); err == nil && v.Name != "" && l.Name == v.Name {
		renewed := l.Written.UTC()
		v.Renewed = &renewed
	}
	s.withLease(&v)
	return v, true
}

// lease returns how long, from now, the application may act as leader
// without hearing from the sidecar again: until this instance's validity
// deadline, when its election stands down and /self turns 503; 0 when it
// does not lead. The deadline is the library's (election.WorkDeadline,
// less the work margin), moved by each acknowledged renewal, on the
// election's clock, which for the subtraction from time.Now must be the
// machine's (see the package documentation); a suspend makes it 0.
//
// The application counts the lease from when it receives the answer, a
// little after the sidecar wrote it: the delivery over loopback, the
// application's own polling and the unit of work it is in come out of the
// work margin that follows the validity deadline (Timing.WorkMargin: 116 ms
// at a 2 s TTL, 723 ms at 10 s), the time election run's guard leaves a
// command to stop in. Only after that margin can the key age out and
// another candidate lead.
func (s *Server) lease(now time.Time) time.Duration {
	s.mu.Lock()
	leading := s.leadCtx
	s.mu.Unlock()
	if leading == nil {
		return 0
	}
	work, ok := election.WorkDeadline(leading)
	if !ok {
		return 0 // the validity deadline passed, or leadership ended
	}
	return max(work.Add(-s.workMargin).Sub(now), 0)
}

// withLease sets v's lease as of now: 0 unless v says this instance
// leads.
func (s *Server) withLease(v *Leadership) {
	v.LeaseMS = 0
	if v.IsLeader {
		v.LeaseMS = s.lease(time.Now()).Milliseconds() // rounded down
	}
}

// onEvent is the election's event hook: an acknowledged renewal of the
// leadership makes the streams get a fresh lease (refreshLeases). It runs
// on the election's campaign goroutine, and returns at once.
func (s *Server) onEvent(ev election.Event) {
	if ev.Kind != election.EventRenewed || ev.Err != nil {
		return
	}
	s.mu.Lock()
	leading := s.leadCtx
	s.mu.Unlock()
	if leading == nil {
		return // a renewal before this instance announced
	}
	before, ok := election.WorkDeadline(leading)
	if !ok {
		return
	}
	select {
	case s.renewed <- before:
	default: // a refresh is pending already
	}
}

// extensionWait bounds how long refreshLeases waits for a renewal to move
// the election's deadline.
const extensionWait = 100 * time.Millisecond

// awaitExtension waits until the election's work deadline is later than
// before, the leadership has ended, or extensionWait has passed, reading
// the deadline every millisecond; false if stop was closed first.
func (s *Server) awaitExtension(before time.Time, stop <-chan struct{}) bool {
	timer := time.NewTimer(time.Millisecond)
	defer timer.Stop()
	for giveUp := time.Now().Add(extensionWait); time.Now().Before(giveUp); timer.Reset(time.Millisecond) {
		s.mu.Lock()
		leading := s.leadCtx
		s.mu.Unlock()
		if leading == nil {
			return true
		}
		if work, ok := election.WorkDeadline(leading); !ok || work.After(before) {
			return true
		}
		select {
		case <-stop:
			return false
		case <-timer.C:
		}
	}
	return true
}

// refreshLeases sends every event stream the leadership, with a fresh
// lease, after each acknowledged renewal, until stop is closed. The
// election reports a renewal (EventRenewed) just before it moves its
// deadline, and reports nothing after, so each refresh waits for the
// deadline to move, reading it every millisecond, for extensionWait at
// most: only a deadline the election holds is ever sent as a lease.
func (s *Server) refreshLeases(stop <-chan struct{}) {
	for {
		var before time.Time
		select {
		case <-stop:
			return
		case before = <-s.renewed:
		}
		if !s.awaitExtension(before, stop) {
			return
		}
		s.mu.Lock()
		if s.leading {
			s.sendLocked(s.viewLocked(true, time.Now()))
		}
		s.mu.Unlock()
	}
}

// Close ends every event stream and refuses new ones: an HTTP server's
// Shutdown waits for them otherwise.
func (s *Server) Close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	for stream := range s.streams {
		close(stream)
		delete(s.streams, stream)
	}
}

// Handler serves the endpoints; anything else is 404:
//
//	GET /         {"name": LEADER}, as Kubernetes' leader-elector sidecar answers
//	GET /leader   the Leadership as JSON
//	GET /self     the same, with 200 while this instance leads, else 503
//	GET /events   server-sent events: the Leadership, then each change
//	GET /healthz  Health as JSON: 200 while healthy, else 503
//
// Before Follow has read the key, every endpoint answers 503.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", s.serveName)
	mux.HandleFunc("GET /leader", s.serveLeader)
	mux.HandleFunc("GET /self", s.serveSelf)
	mux.HandleFunc("GET /events", s.serveEvents)
	mux.HandleFunc("GET /healthz", s.serveHealth)
	return mux
}

// notWatching answers 503 before the watcher has reported the key.
func notWatching(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusServiceUnavailable)
	json.NewEncoder(w).Encode(map[string]string{"error": "the sidecar has not read the key yet"})
}

// serveName answers {"name": LEADER}, the answer of Kubernetes'
// leader-elector sidecar, so that its users can swap it in.
func (s *Server) serveName(w http.ResponseWriter, r *http.Request) {
	v, ok := s.now(r.Context())
	if !ok {
		notWatching(w)
		return
	}
	writeJSON(w, struct {
		Name string `json:"name"`
	}{v.Name})
}

// serveLeader answers the leadership as JSON.
func (s *Server) serveLeader(w http.ResponseWriter, r *http.Request) {
	v, ok := s.now(r.Context())
	if !ok {
		notWatching(w)
		return
	}
	writeJSON(w, v)
}

// serveSelf answers as /leader does, with 200 while this instance leads and
// 503 while it does not: a snapshot, stale as soon as it is sent.
func (s *Server) serveSelf(w http.ResponseWriter, r *http.Request) {
	v, ok := s.now(r.Context())
	if !ok {
		notWatching(w)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	if !v.IsLeader {
		w.WriteHeader(http.StatusServiceUnavailable)
	}
	json.NewEncoder(w).Encode(v)
}

// serveEvents streams the leadership as server-sent events: the current
// state, then each change, until the client goes or the sidecar stops.
func (s *Server) serveEvents(w http.ResponseWriter, r *http.Request) {
	flusher, ok := w.(http.Flusher)
	if !ok {
		http.Error(w, "streaming unsupported", http.StatusInternalServerError)
		return
	}
	select {
	case <-s.watching:
	default:
		notWatching(w)
		return
	}
	stream := make(chan Leadership, streamBuffer)
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		http.Error(w, "the sidecar is stopping", http.StatusServiceUnavailable)
		return
	}
	s.streams[stream] = struct{}{}
	s.mu.Unlock()
	// The first event is checked as /self checks it: the last event sent
	// can say this instance leads when its deadline has passed (the
	// sidecar was paused, and has not stood down yet).
	current, _ := s.now(r.Context())
	defer func() {
		s.mu.Lock()
		delete(s.streams, stream) // closed already if the sidecar ended it
		s.mu.Unlock()
	}()

	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	writeEvent(w, current)
	flusher.Flush()
	tick := time.NewTicker(keepAlive)
	defer tick.Stop()
	for {
		select {
		case <-r.Context().Done():
			return
		case v, ok := <-stream:
			if !ok {
				return
			}
			s.withLease(&v)
			writeEvent(w, v)
		case <-tick.C:
			fmt.Fprint(w, ": keep-alive\n\n")
		}
		flusher.Flush()
	}
}

// writeEvent writes v as one server-sent event.
func writeEvent(w http.ResponseWriter, v Leadership) {
	data, _ := json.Marshal(v) // a plain struct: cannot fail
	fmt.Fprintf(w, "data: %s\n\n", data)
}

// Health is the JSON of /healthz.
type Health struct {
	OK          bool   `json:"ok"`                // connected, campaigning, watching, listed and not stuck
	Connected   bool   `json:"connected"`         // to a NATS server
	Campaigning bool   `json:"campaigning"`       // the election runs
	Watching    bool   `json:"watching"`          // the watcher has read the key
	Listed      bool   `json:"listed"`            // this candidate's record is in the bucket: it can write there
	Problem     string `json:"problem,omitempty"` // what is wrong, unless OK
}

// serveHealth answers 200 while the sidecar is connected, campaigning,
// watching, listed (its own candidate record, which it writes first, is in
// the bucket, so it can write there and no other live candidate holds its
// name) and not stuck (Election.CheckHealth), and
// 503 otherwise, naming the problem. Whether this instance leads does not
// count.
func (s *Server) serveHealth(w http.ResponseWriter, r *http.Request) {
	h := Health{Connected: s.connected(), Campaigning: s.election.State() != election.UnknownState}
	select {
	case <-s.watching:
		h.Watching = true
	default:
	}
	if candidates, err := s.bucket.Candidates(r.Context(), s.key); err == nil {
		h.Listed = slices.ContainsFunc(candidates, func(c election.Candidate) bool {
			return c.Name == s.self && c.Writer.Instance == s.election.Instance()
		})
	}
	switch err := s.election.CheckHealth(s.tolerance); {
	case !h.Connected:
		h.Problem = "not connected to a NATS server; reconnecting"
	case !h.Campaigning:
		h.Problem = "the election is not running"
	case !h.Watching:
		h.Problem = "the key has not been read yet"
	case !h.Listed:
		h.Problem = "this candidate's record is not in the bucket yet: it has just started, may not write the bucket, or another candidate holds its name"
	case err != nil:
		h.Problem = err.Error()
	default:
		h.OK = true
	}
	w.Header().Set("Content-Type", "application/json")
	if !h.OK {
		w.WriteHeader(http.StatusServiceUnavailable)
	}
	json.NewEncoder(w).Encode(h)
}

// writeJSON answers v as JSON.
func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(v)
}
