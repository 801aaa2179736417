package cli

import (
	"cmp"
	"context"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/kvelect/election"
	"github.com/kvelect/election/fleet"
	"github.com/kvelect/election/history"
	"github.com/kvelect/election/mirror"
	"github.com/kvelect/election/promelection"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/sirupsen/logrus"
)

const dashboardAbout = `Usage:
  election dashboard --listen ADDR [--bucket B] [--mirror M] [--metrics ADDR]
                     [--log-format text|json] [--log-level info]

Serves a web page on ADDR (HOST:PORT) that shows, for every key of the
bucket B: its leader, fencing token, since when it leads, the age of its
latest renewal, its candidates and whether it is healthy (a leader whose
renewal is late or whose leadership has lapsed is not, at the ages election
check warns and fails at); a timeline of each
key's holders, from the leadership history (election bucket create
--history); the latest changes; and the bucket's fleet, if it has one: its
nodes with their capacity, load and labels, and its daemons with their node,
state, token, restarts and last error (as election status shows them).
A leader that led before the dashboard started shows the token and start
the history recorded for it; without one, its token is at most its latest
write's revision, and it leads since before the dashboard started. It updates live, without reloading,
and stays usable with 10,000 keys (search and pages). It only reads: nothing
on it changes an election. Everything it serves is built in; it fetches
nothing from the internet.

--mirror M reads M, a KV mirror of the bucket B, instead of B, as election
status --mirror does: for a dashboard in another region. The page then says
on top "from mirror M of bucket B: not authoritative, may be stale" with the
mirror's lag (the messages of B it lacks, and how long ago it last heard
from B), refreshed every 2 s; /api/keys and /api/fleet give it as
"mirror": {"mirror":"M","bucket":"B","authoritative":false,...}. It reads
nothing of B itself: no timeline (the history lives with B), no tokens of
leaders that led before it started. A bucket that is not a mirror of B is
an error.

The page's data is also JSON, for scripts:
  GET /api/keys?search=S&offset=0&limit=100   the keys, sorted, with paging
  GET /api/history?key=K                      the key's history (404 without one)
  GET /api/fleet                              the fleet's nodes and daemons
  GET /api/changes                            server-sent events, one per change

--metrics ADDR serves /metrics on another address, for Prometheus, with
kvelect_election_has_leader{key} (1 while someone holds the key) and
kvelect_election_leader_changes_seen_total{key} (new holders seen) for
every key the dashboard has seen, and kvelect_build_info; and /healthz.

Exit status: 0 after SIGINT or SIGTERM; 1 if the server, the bucket or the
address failed; 2 for bad flags.
`

//go:embed dashboard
var dashboardAssets embed.FS

// dashboardCommand defines the flags of "election dashboard" and returns
// them with the function that runs it.
func dashboardCommand() (*flagSet, runFunc) {
	fs := newFlagSet("election dashboard", dashboardAbout)
	var conn connFlags
	conn.add(fs)
	var bucket, listen, mirror string
	fs.bucketVar(&bucket, "the election bucket's `NAME`")
	fs.Var(bucketFlag{&mirror}, "mirror", "read the KV mirror `NAME` of the bucket instead of the bucket: for a dashboard elsewhere; not authoritative, maybe stale")
	fs.StringVar(&listen, "listen", "", "serve the page on `ADDR`, HOST:PORT (required), such as 127.0.0.1:8080")
	var metricsAddr string
	fs.StringVar(&metricsAddr, "metrics", "", "serve /metrics and /healthz over HTTP on `ADDR`, HOST:PORT: has_leader and leader_changes_seen_total per key")
	var logFormat, logLevel string
	fs.StringVar(&logLevel, "log-level", "info", "log `LEVEL`: debug, info, warn or error")
	fs.StringVar(&logFormat, "log-format", "text", "log `FORMAT`: text, or json for one object per line")
	return fs, func(args []string, stdout, stderr io.Writer) int {
		if code, ok := fs.parse(args, stdout, stderr); !ok {
			return code
		}
		switch {
		case fs.NArg() > 0:
			return fs.usageError(stderr, "unexpected argument %q", fs.Arg(0))
		case listen == "":
			return fs.usageError(stderr, "--listen is required: the HOST:PORT to serve the page on")
		}
		// The same log lines as run's, sidecar's and agent's: times to the millisecond.
		log := logrus.New()
		log.SetOutput(stderr)
		if err := setupLog(log, logFormat, logLevel, "--log-format ", "--log-level "); err != nil {
			return fs.usageError(stderr, "%v", err)
		}
		if _, _, err := net.SplitHostPort(listen); err != nil {
			return fs.usageError(stderr, "--listen %q: want HOST:PORT, such as 127.0.0.1:8080 or :8080", listen)
		}
		if err := checkMetricsAddr(metricsAddr); err != nil {
			return fs.usageError(stderr, "%v", err)
		}

		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		defer stop()
		setupCtx, cancel := context.WithTimeout(ctx, bucketTimeout)
		defer cancel()
		setupCtx, stopWatching := conn.watchDenials(setupCtx, roleObserver)
		defer stopWatching()
		nc, js, err := conn.connect("election dashboard")
		if err != nil {
			return fail(stderr, fs.path, deniedOr(setupCtx, err))
		}
		defer nc.Close()
		src, err := openObserved(setupCtx, js, bucket, mirror)
		if err != nil {
			return fail(stderr, fs.path, deniedOr(setupCtx, err))
		}
		b, err := election.OpenBucket(setupCtx, src.kv)
		if err != nil {
			return fail(stderr, fs.path, deniedOr(setupCtx, err))
		}
		defer b.Close()
		ln, err := net.Listen("tcp", listen)
		if err != nil {
			return fail(stderr, fs.path, fmt.Errorf("--listen: %w", err))
		}
		defer ln.Close() // after Shutdown, a no-op
		metrics, om, err := listenObserverMetrics(metricsAddr)
		if err != nil {
			return fail(stderr, fs.path, err)
		}
		if metrics != nil {
			defer metrics.close()
		}
		d := newDashboard(b, js, bucket)
		d.metrics = om
		d.mirror = src.mirror
		srv := &http.Server{Handler: d.handler(), ReadHeaderTimeout: 10 * time.Second}
		served := make(chan error, 1)
		go func() { served <- srv.Serve(ln) }()
		go d.follow(ctx)

		if src.mirror != nil {
			log.WithField("url", "http://"+ln.Addr().String()+"/").Infof("serving the dashboard of bucket %s %s", bucket, notAuthoritative(src.mirror))
		} else {
			log.WithField("url", "http://"+ln.Addr().String()+"/").Infof("serving the dashboard of bucket %s", bucket)
		}
		select {
		case <-ctx.Done():
		case err := <-served:
			return fail(stderr, fs.path, err)
		}
		shutdownCtx, cancelShutdown := context.WithTimeout(context.Background(), shutdownTimeout)
		defer cancelShutdown()
		d.close()
		if err := srv.Shutdown(shutdownCtx); err != nil {
			return fail(stderr, fs.path, err)
		}
		return ExitOK
	}
}

// dashboard serves the page and its data for one bucket.
type dashboard struct {
	bucket *election.Bucket
	js     jetstream.JetStream
	name   string
	// metrics notes each key's holders for --metrics; nil without it.
	metrics *promelection.ObserverCollector
	// mirror is the mirror read instead of the bucket (--mirror), whose
	// label and lag go with every page; nil: the bucket itself.
	mirror *mirror.Mirror

	mu       sync.Mutex
	leaders  map[string]seenLeader // as last recorded
	changes  []keyChange           // the latest, newest last
	watchers map[chan keyChange]struct{}
	closed   bool
}

// seenLeader is a key's leader as the dashboard has followed it.
type seenLeader struct {
	name  string
	since time.Time // when the dashboard first saw it lead, or the history's record of its win
	// before says the leader already led when the dashboard started and
	// the history does not say since when: since is the dashboard's start.
	before bool
	// token is the revision of the entry that showed it holding the key:
	// its claim, the fencing token; for a leader that already led when the
	// dashboard started, the token of its win in the history, or 0.
	token uint64
}

// keyChange is a change of a key's leader, as the page shows it.
type keyChange struct {
	At     time.Time `json:"at"`
	Key    string    `json:"key"`
	Leader string    `json:"leader"` // "" when nobody holds the key
	Token  uint64    `json:"token,omitempty"`
}

// recentChanges bounds the changes the page lists.
const recentChanges = 200

func newDashboard(b *election.Bucket, js jetstream.JetStream, name string) *dashboard {
	return &dashboard{bucket: b, js: js, name: name, leaders: map[string]seenLeader{}, watchers: map[chan keyChange]struct{}{}}
}

func (d *dashboard) handler() http.Handler {
	mux := http.NewServeMux()
	assets, _ := fs.Sub(dashboardAssets, "dashboard") // the directory is embedded: cannot fail
	mux.Handle("GET /", http.FileServerFS(assets))
	mux.HandleFunc("GET /api/keys", d.serveKeys)
	mux.HandleFunc("GET /api/history", d.serveHistory)
	mux.HandleFunc("GET /api/fleet", d.serveFleet)
	mux.HandleFunc("GET /api/changes", d.serveChanges)
	return mux
}

// keyRow is one key as the page lists it.
type keyRow struct {
	Key        string     `json:"key"`
	Leader     string     `json:"leader"`
	Done       *doneMark  `json:"done,omitempty"`         // a job's done mark (leader ""): who ran it, when, until when it stands
	Token      uint64     `json:"token,omitempty"`        // the fencing token, if the dashboard saw the claim or the history has it
	Revision   uint64     `json:"revision,omitempty"`     // the leader's latest write: the token is at most this
	Since      *time.Time `json:"since,omitempty"`        // when the leader won, as the dashboard or the history saw it
	Before     bool       `json:"since_before,omitempty"` // the leader led before since, the dashboard's start
	RenewedAgo *float64   `json:"renewed_ago,omitempty"`  // seconds since the leader's latest write, by the server's clock
	// Renewal is, with a leader, "on time", "late" (past the page's
	// renewal_late_seconds) or "lapsed" (past renewal_lapsed_seconds: the
	// leader has stood down by its own clock).
	Renewal    string   `json:"renewal,omitempty"`
	Candidates []string `json:"candidates"`
	Healthy    bool     `json:"healthy"` // a leader whose renewal is on time, or nobody to expect
}

// keysPage is a page of keys.
type keysPage struct {
	Bucket string      `json:"bucket"`
	Mirror *mirrorJSON `json:"mirror,omitempty"` // with --mirror: where the page comes from, not authoritative
	// RenewalLate and RenewalLapsed are the ages of a leader's latest write
	// past which its renewal is late and its leadership has lapsed, for
	// the default campaign interval (renewalLimits).
	RenewalLate   float64     `json:"renewal_late_seconds"`
	RenewalLapsed float64     `json:"renewal_lapsed_seconds"`
	Total         int         `json:"total"`
	Offset        int         `json:"offset"`
	Keys          []keyRow    `json:"keys"`
	Changes       []keyChange `json:"changes"`
}

// maxPage bounds the keys of one page.
const maxPage = 1000

func (d *dashboard) serveKeys(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	offset, err1 := atoiOr(q.Get("offset"), 0)
	limit, err2 := atoiOr(q.Get("limit"), 100)
	if err := errors.Join(err1, err2); err != nil || offset < 0 || limit < 1 || limit > maxPage {
		http.Error(w, fmt.Sprintf("offset must be 0 or more and limit 1 to %d", maxPage), http.StatusBadRequest)
		return
	}
	rows, err := d.rows(r.Context(), strings.ToLower(q.Get("search")))
	if err != nil {
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
		return
	}
	late, lapsed := renewalLimits(d.bucket.TTL(), 0)
	page := keysPage{Bucket: d.name, Mirror: d.mirrorJSON(r.Context()), RenewalLate: seconds(late), RenewalLapsed: seconds(lapsed),
		Total: len(rows), Offset: offset, Keys: rows[min(offset, len(rows)):min(offset+limit, len(rows))]}
	d.mu.Lock()
	page.Changes = slices.Clone(d.changes)
	d.mu.Unlock()
	writeJSON(w, page)
}

// mirrorJSON is the mirror the dashboard reads, with its lag now; nil
// without --mirror. A lag it cannot read shows as the mirror's error.
func (d *dashboard) mirrorJSON(ctx context.Context) *mirrorJSON {
	if d.mirror == nil {
		return nil
	}
	lag, err := d.mirror.Lag(ctx)
	if err != nil {
		lag = mirror.Lag{Heard: -1, Error: err.Error()}
	}
	j := mirrorJSONOf(d.mirror, lag)
	return &j
}

// serverTime is the time now by the clock of the servers of the bucket
// (or of the mirror, with --mirror), which stamped the keys' writes: so a
// renewal's age carries no offset between this host's clock and theirs, as
// in election check (serverTime). This host's clock if they do not answer.
func (d *dashboard) serverTime(ctx context.Context) time.Time {
	name := d.name
	if d.mirror != nil {
		name = d.mirror.Name()
	}
	kv, err := d.js.KeyValue(ctx, name)
	if err != nil {
		return time.Now()
	}
	return serverTime(ctx, kv)()
}

func atoiOr(s string, fallback int) (int, error) {
	if s == "" {
		return fallback, nil
	}
	return strconv.Atoi(s)
}

// rows returns every key with a leader or a candidate whose name contains
// search, sorted, but the fleet's keys: the fleet view shows them.
func (d *dashboard) rows(ctx context.Context, search string) ([]keyRow, error) {
	leaders, err := d.bucket.Leaders(ctx)
	if err != nil {
		return nil, err
	}
	candidates, err := d.bucket.AllCandidates(ctx)
	if err != nil {
		return nil, err
	}
	byKey := map[string]keyRow{}
	late, lapsed := renewalLimits(d.bucket.TTL(), 0)
	now := d.serverTime(ctx)
	leaders = slices.DeleteFunc(leaders, func(l election.Leader) bool { return fleet.IsFleetKey(l.Key) })
	marks, leaders := d.doneMarks(ctx, leaders, now)
	d.mu.Lock()
	for _, l := range leaders {
		if m, ok := marks[l.Key]; ok {
			byKey[l.Key] = keyRow{Key: l.Key, Done: &m, Revision: l.Revision}
			continue
		}
		if l.Name == "" {
			continue
		}
		row := keyRow{Key: l.Key, Leader: l.Name, Revision: l.Revision, Renewal: "on time"}
		age := max(now.Sub(l.Written), 0)
		switch {
		case age > lapsed:
			row.Renewal = "lapsed"
		case age > late:
			row.Renewal = "late"
		}
		ago := seconds(age)
		row.RenewedAgo = &ago
		if seen, ok := d.leaders[l.Key]; ok && seen.name == l.Name {
			row.Token, row.Since, row.Before = seen.token, &seen.since, seen.before
		}
		byKey[l.Key] = row
	}
	d.mu.Unlock()
	for key, cs := range candidates {
		if fleet.IsFleetKey(key) {
			continue
		}
		row := byKey[key]
		row.Key = key
		for _, c := range cs {
			row.Candidates = append(row.Candidates, c.Name)
		}
		byKey[key] = row
	}
	rows := make([]keyRow, 0, len(byKey))
	for _, row := range byKey {
		if search != "" && !strings.Contains(strings.ToLower(row.Key), search) {
			continue
		}
		if row.Candidates == nil {
			row.Candidates = []string{}
		}
		row.Healthy = row.Leader == "" && len(row.Candidates) == 0 || row.Renewal == "on time" || row.Done != nil
		rows = append(rows, row)
	}
	slices.SortFunc(rows, func(a, b keyRow) int { return cmp.Compare(a.Key, b.Key) })
	return rows, nil
}

// doneMarks returns, by key, the done marks to show instead of leaders
// (done_marks.go): the keys' own, or the history's where they last longer
// (--done-for), with leaders and a row for each key whose mark stands in
// the history alone. With --mirror, the keys' own: the history lives with
// the bucket.
func (d *dashboard) doneMarks(ctx context.Context, leaders []election.Leader, now time.Time) (map[string]doneMark, []election.Leader) {
	marks := map[string]doneMark{}
	for _, l := range leaders {
		if m, ok := keyMark(l, d.bucket.TTL()); ok {
			marks[l.Key] = m
		}
	}
	if d.mirror != nil {
		return marks, leaders
	}
	return mergeLogMarks(marks, leaders, logMarks(ctx, d.js, d.name, "", now), true)
}

func (d *dashboard) serveHistory(w http.ResponseWriter, r *http.Request) {
	key := r.URL.Query().Get("key")
	if err := election.CheckKey(key); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	if d.mirror != nil {
		http.Error(w, fmt.Sprintf("%s: the leadership history lives with bucket %s, which the dashboard does not read", notAuthoritative(d.mirror), d.name), http.StatusNotFound)
		return
	}
	h, err := history.Open(r.Context(), d.js, d.name)
	if errors.Is(err, history.ErrNoHistory) {
		http.Error(w, err.Error(), http.StatusNotFound)
		return
	}
	var events []history.Event
	if err == nil {
		events, err = h.Events(r.Context(), key, time.Time{})
	}
	if err != nil {
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
		return
	}
	out := make([]historyJSON, len(events))
	for i, ev := range events {
		out[i] = historyJSON{ev, ev.At.UTC()}
	}
	writeJSON(w, out)
}

// fleetPage is the bucket's fleet as the page shows it: the nodes and the
// daemons as election status --json prints them.
type fleetPage struct {
	Mirror  *mirrorJSON       `json:"mirror,omitempty"` // with --mirror: where the page comes from, not authoritative
	Nodes   []nodeJSON        `json:"nodes"`
	Daemons []fleetDaemonJSON `json:"daemons"`
}

// fleetDaemonJSON is a daemon with its election key, for its timeline.
type fleetDaemonJSON struct {
	daemonJSON
	Key string `json:"key"`
}

func (d *dashboard) serveFleet(w http.ResponseWriter, r *http.Request) {
	st, err := fleet.ReadStatus(r.Context(), d.bucket)
	if err != nil {
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
		return
	}
	now := time.Now()
	page := fleetPage{Mirror: d.mirrorJSON(r.Context()), Nodes: []nodeJSON{}, Daemons: []fleetDaemonJSON{}}
	running := map[string][]string{}
	for _, dm := range st.Daemons {
		if dm.State == fleet.Running || dm.State == fleet.Revoking {
			running[dm.Node] = append(running[dm.Node], dm.Name)
		}
		j := daemonJSON{Daemon: dm.Name, Node: dm.Node, State: string(dm.State), Token: dm.Token, Restarts: dm.Restarts, LastError: dm.LastError}
		if !dm.Since.IsZero() {
			since := dm.Since.UTC()
			j.Since = &since
		}
		page.Daemons = append(page.Daemons, fleetDaemonJSON{j, fleet.DaemonKey(dm.Name)})
	}
	for _, m := range st.Members {
		page.Nodes = append(page.Nodes, nodeJSON{Node: m.Name, Since: m.Since.UTC(), AgeSeconds: seconds(max(now.Sub(m.Since), 0)),
			Capacity: m.Capacity, Labels: m.Labels, Version: m.Version, CanRun: nonNil(m.Daemons), Running: nonNil(running[m.Name]),
			Unhealthy: m.Unhealthy})
	}
	writeJSON(w, page)
}

// serveChanges streams each change of leader as a server-sent event.
func (d *dashboard) serveChanges(w http.ResponseWriter, r *http.Request) {
	flusher, ok := w.(http.Flusher)
	if !ok {
		http.Error(w, "streaming unsupported", http.StatusInternalServerError)
		return
	}
	changes := make(chan keyChange, 256)
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		http.Error(w, "the dashboard is stopping", http.StatusServiceUnavailable)
		return
	}
	d.watchers[changes] = struct{}{}
	d.mu.Unlock()
	defer func() {
		d.mu.Lock()
		delete(d.watchers, changes)
		d.mu.Unlock()
	}()
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	if d.mirror != nil {
		fmt.Fprintf(w, ": connected, %s\n\n", notAuthoritative(d.mirror))
	} else {
		fmt.Fprint(w, ": connected\n\n")
	}
	flusher.Flush()
	for {
		select {
		case <-r.Context().Done():
			return
		case c, ok := <-changes:
			if !ok {
				return
			}
			data, _ := json.Marshal(c) // a plain struct: cannot fail
			fmt.Fprintf(w, "data: %s\n\n", data)
			flusher.Flush()
		}
	}
}

// follow records each change of leader the bucket's watcher delivers and
// sends it to the pages, until ctx is done. The leaders there at the start
// led before the dashboard: their claims, the fencing tokens, and their
// starts are what the leadership history recorded, if anything.
func (d *dashboard) follow(ctx context.Context) {
	changes, err := d.bucket.ObservePrefix(ctx, "") // before the snapshot, so that no change falls between
	if err != nil {
		return
	}
	var learnt sync.WaitGroup
	defer learnt.Wait()
	if leaders, err := d.bucket.Leaders(ctx); err == nil {
		d.mu.Lock()
		for _, l := range leaders {
			d.leaders[l.Key] = seenLeader{name: l.Name, since: time.Now(), before: true}
			if d.metrics != nil {
				d.metrics.Seen(l)
			}
		}
		d.mu.Unlock()
		if d.mirror == nil { // the history lives with the bucket
			learnt.Go(func() { d.learnFromHistory(ctx, leaders) })
		}
	}
	for l := range changes {
		d.record(l, time.Now())
	}
}

// learnFromHistory gives the leaders that led before the dashboard started
// the token and the time of their win, from the leadership history: the
// win of each one's current tenure (history.CurrentWin). Without a
// history, or that win, they stay unknown.
func (d *dashboard) learnFromHistory(ctx context.Context, leaders []election.Leader) {
	h, err := history.Open(ctx, d.js, d.name)
	if err != nil {
		return
	}
	events, err := h.Events(ctx, "", time.Time{})
	if err != nil {
		return
	}
	byKey := map[string][]history.Event{}
	for _, ev := range events {
		byKey[ev.Key] = append(byKey[ev.Key], ev)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, l := range leaders {
		seen := d.leaders[l.Key]
		if !seen.before || seen.name != l.Name {
			continue // its win was seen, or another leads now
		}
		if ev, ok := history.CurrentWin(l, byKey[l.Key]); ok {
			d.leaders[l.Key] = seenLeader{name: l.Name, since: ev.At, token: ev.Token}
		}
	}
}

// record notes a key's holder, l, and sends it to the pages if it changed.
func (d *dashboard) record(l election.Leader, now time.Time) {
	if d.metrics != nil {
		d.metrics.Seen(l)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	old, known := d.leaders[l.Key]
	switch {
	case known && old.name == l.Name, !known && l.Name == "":
		return // a holder it already knew, or still nobody
	case l.Name == "":
		delete(d.leaders, l.Key)
	case l.Claimed:
		d.leaders[l.Key] = seenLeader{name: l.Name, since: now, token: l.Revision}
	default: // a holder first seen by a renewal: it led before now, from a claim unseen
		d.leaders[l.Key] = seenLeader{name: l.Name, since: now, before: true}
	}
	c := keyChange{At: now, Key: l.Key, Leader: l.Name, Token: d.leaders[l.Key].token}
	d.changes = append(d.changes, c)
	if len(d.changes) > recentChanges {
		d.changes = slices.Clone(d.changes[len(d.changes)-recentChanges:])
	}
	for watcher := range d.watchers {
		select {
		case watcher <- c:
		default: // a page that does not keep up reloads its list
		}
	}
}

// close ends every page's stream of changes.
func (d *dashboard) close() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.closed = true
	for watcher := range d.watchers {
		close(watcher)
		delete(d.watchers, watcher)
	}
}
