package main

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"maps"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/kvelect/election"
	"github.com/kvelect/election/fleet"
	"github.com/kvelect/election/history"
	"github.com/nats-io/nats.go/jetstream"
)

const statusAbout = `Usage:
  election status [--bucket B] [--key K] [--json]
  election status --key K --watch [--bucket B] [--json] [--metrics ADDR]

Prints who leads each key of the bucket B that has a leader or a candidate,
or the key K (LEADER "none" when nobody holds it): the leader's name, its
fencing TOKEN (the revision of the claim that won, the KVELECT_TOKEN of the
leader's command) and SINCE when it has led (by the server's clock), its
latest write's REVISION (its claim or a renewal), the AGE of that write by
the server's clock, and the names of the key's live candidates (the leader
among them, each with ":N" if its priority N is not 1): the elections for
the key running in any process. TOKEN and SINCE come from the bucket's
leadership history (election bucket create makes it; election run records in
it): an observer that started after the claim cannot learn them from the
key, which keeps only its latest write. They show "-" when the bucket has no
history, when it cannot be read, or when the leader's win is not recorded
(yet, or it ran with --history=false). A stopped
candidate drops out at once, a crashed one a TTL after its last write. The
last line counts the watchers on the bucket, one per process that
opened it with the library's OpenBucket (and one per election made without
a Bucket), so roughly the running candidates' processes. A process that
died without closing its watcher still counts until the server drops its
consumer, 5-6 s later; a watcher the NATS client recreated (after a missed
message or heartbeat) deletes its old consumer without waiting, so the
count can be one high for a moment.

If the bucket holds a fleet (election agent), its nodes and daemons are
listed instead of their keys: each node's age, capacity, daemons running
out of those it can run, labels and version; each daemon's node, state
(assigning, running, crash-looping, revoking, stopped), fencing token, time
in that run, and restarts with the last error. crash-looping is a running
daemon that exited by itself less than a minute ago: its node starts it
again after a backoff (a command not found, a daemon that fails at start).

--watch prints K's leader, then each change (a new leader, or none) until
SIGINT or SIGTERM, and exits 0. Renewals are not changes.

--json prints one JSON object per line instead of the table:
  {"key":"K","leader":"NAME","token":5,"since":"2026-...Z","revision":7,"written":"2026-...Z","age_seconds":1.2,"candidates":["NAME","B"]}
with "leader":"" when nobody holds K, and no "token" nor "since" when they
are not known; for a fleet, one line per node and
per daemon:
  {"node":"N","since":"...","age_seconds":9.5,"capacity":1,"labels":{"zone":"a"},"can_run":["x","y"],"running":["x"]}
  {"daemon":"x","node":"N","state":"running","token":42,"since":"...","restarts":1,"restarted":"...","last_error":"..."}
and, without --watch, a last line
  {"bucket":"B","watchers":3}

--metrics ADDR, with --watch, serves /metrics on ADDR (HOST:PORT) with
kvelect_election_has_leader{key} (1 while someone holds K) and
kvelect_election_leader_changes_seen_total{key} (new holders seen), and
kvelect_build_info; and /healthz.

Exit status: 0; 1 if the server or the bucket failed; 2 for bad flags.
`

// statusConfig is what the flags of status say.
type statusConfig struct {
	conn    connFlags
	bucket  string
	key     string
	watch   bool
	json    bool
	metrics string // with watch: the address to serve metrics on, or ""
}

// statusMain runs "election status".
func statusMain(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("election status", statusAbout)
	var cfg statusConfig
	cfg.conn.add(fs)
	fs.bucketVar(&cfg.bucket, "the election bucket's `NAME`")
	fs.StringVar(&cfg.key, "key", "", "only this election `KEY`; default every key that has a leader")
	fs.BoolVar(&cfg.watch, "watch", false, "print each change of --key's leader until interrupted")
	fs.BoolVar(&cfg.json, "json", false, "print one JSON object per line")
	fs.StringVar(&cfg.metrics, "metrics", "", "with --watch, serve /metrics and /healthz over HTTP on `ADDR`, HOST:PORT")
	if code, ok := fs.parse(args, stdout, stderr); !ok {
		return code
	}
	if fs.NArg() > 0 {
		return fs.usageError(stderr, "unexpected argument %q", fs.Arg(0))
	}
	if cfg.watch && cfg.key == "" {
		return fs.usageError(stderr, "--watch needs --key: the key to watch")
	}
	if err := checkKeyFlag(cfg.key); err != nil {
		return fs.usageError(stderr, "%v", err)
	}
	if cfg.metrics != "" && !cfg.watch {
		return fs.usageError(stderr, "--metrics is for --watch")
	}
	if err := checkMetricsAddr(cfg.metrics); err != nil {
		return fs.usageError(stderr, "%v", err)
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, stopWatching := cfg.conn.watchDenials(ctx, roleObserver)
	defer stopWatching()
	cfg.conn.quietHistory() // without a history, status shows what the bucket tells
	nc, js, err := cfg.conn.connect("election status")
	if err != nil {
		return fail(stderr, fs.path, deniedOr(ctx, err))
	}
	defer nc.Close()
	openCtx, cancel := context.WithTimeout(ctx, bucketTimeout)
	defer cancel()
	kv, err := openBucket(openCtx, js, cfg.bucket)
	if err != nil {
		return fail(stderr, fs.path, deniedOr(ctx, err))
	}
	// Count the watchers before this process adds its own.
	watchers, err := countWatchers(openCtx, js, cfg.bucket)
	if err != nil {
		return fail(stderr, fs.path, deniedOr(ctx, err))
	}
	b, err := election.OpenBucket(openCtx, kv)
	if err != nil {
		return fail(stderr, fs.path, deniedOr(ctx, err))
	}
	defer b.Close()

	out := leaderPrinter{w: stdout, json: cfg.json}
	if cfg.watch {
		metrics, om, err := listenObserverMetrics(cfg.metrics)
		if err != nil {
			return fail(stderr, fs.path, err)
		}
		if metrics != nil {
			defer metrics.close()
		}
		if err := deniedOr(ctx, watchLeader(ctx, b, cfg.key, &out, om)); err != nil {
			return fail(stderr, fs.path, deniedOr(ctx, err))
		}
		return exitOK
	}
	candidates, err := b.AllCandidates(openCtx)
	if err != nil {
		return fail(stderr, fs.path, deniedOr(ctx, err))
	}
	var leaders []election.Leader
	if cfg.key != "" {
		l, err := b.Leader(openCtx, cfg.key)
		if err != nil {
			return fail(stderr, fs.path, deniedOr(ctx, err))
		}
		leaders = []election.Leader{l}
	} else {
		leaders, err = b.Leaders(openCtx)
		if err != nil {
			return fail(stderr, fs.path, deniedOr(ctx, err))
		}
		led := map[string]bool{}
		for _, l := range leaders {
			led[l.Key] = true
		}
		for key := range candidates { // keys campaigned for that nobody leads
			if !led[key] {
				leaders = append(leaders, election.Leader{Key: key})
			}
		}
		slices.SortFunc(leaders, func(a, b election.Leader) int { return cmp.Compare(a.Key, b.Key) })
	}
	now := time.Now()
	var st fleet.Status
	if cfg.key == "" { // the fleet's keys show as its nodes and daemons
		if st, err = fleet.ReadStatus(openCtx, b); err != nil {
			return fail(stderr, fs.path, deniedOr(ctx, err))
		}
		leaders = slices.DeleteFunc(leaders, func(l election.Leader) bool { return fleet.IsFleetKey(l.Key) })
	}
	tenures := readTenures(openCtx, &cfg.conn, js, cfg.bucket, leaders)
	hasFleet := len(st.Members) > 0 || len(st.Daemons) > 0
	printTable := len(leaders) > 0 || !hasFleet
	if printTable {
		out.table(leaders, tenures, candidates, now)
	}
	if hasFleet {
		out.fleet(st, now, printTable)
	}
	out.watchers(cfg.bucket, watchers)
	return exitOK
}

// tenure is what the leadership history tells of a leader's tenure.
type tenure struct {
	token uint64    // the revision of the claim that won
	since time.Time // when the win was recorded, by the server's clock
}

// readTenures returns, by key, the tenure of each leader whose win the
// bucket's leadership history records: the latest win of that name with a
// token no later than the leader's latest write, not followed by its
// stand-down (then the current tenure is not recorded yet). It returns
// what it could read: nothing if the bucket has no history or it cannot be
// read.
func readTenures(ctx context.Context, conn *connFlags, js jetstream.JetStream, bucket string, leaders []election.Leader) map[string]tenure {
	ctx, done := conn.historyContext(ctx)
	defer done()
	h, err := history.Open(ctx, js, bucket)
	if err != nil {
		return nil
	}
	tenures := map[string]tenure{}
	for _, l := range leaders {
		if l.Name == "" {
			continue
		}
		events, err := h.Events(ctx, l.Key, time.Time{})
		if err != nil {
			return tenures
		}
		if t, ok := tenureOf(l, events); ok {
			tenures[l.Key] = t
		}
	}
	return tenures
}

// tenureOf finds l's current tenure in the events of its key, oldest first.
func tenureOf(l election.Leader, events []history.Event) (tenure, bool) {
	for i := len(events) - 1; i >= 0; i-- {
		ev := events[i]
		switch {
		case ev.Name != l.Name || ev.Token > l.Revision:
		case ev.Kind == history.StoodDown:
			return tenure{}, false
		case ev.Kind == history.Won:
			return tenure{token: ev.Token, since: ev.At}, true
		}
	}
	return tenure{}, false
}

// countWatchers returns the number of consumers on the bucket's stream: one
// per Bucket or Election watching it.
func countWatchers(ctx context.Context, js jetstream.JetStream, bucket string) (int, error) {
	stream, err := js.Stream(ctx, "KV_"+bucket)
	if err != nil {
		return 0, fmt.Errorf("reading the stream of bucket %q: %w", bucket, err)
	}
	info, err := stream.Info(ctx)
	if err != nil {
		return 0, fmt.Errorf("reading the stream of bucket %q: %w", bucket, err)
	}
	return info.State.Consumers, nil
}

// watchLeader prints key's leader and each change of it until ctx is done,
// and notes them in om unless it is nil.
func watchLeader(ctx context.Context, b *election.Bucket, key string, out *leaderPrinter, om *observerMetrics) error {
	changes, err := b.Observe(ctx, key)
	if err != nil {
		return err
	}
	out.header()
	for l := range changes {
		if om != nil {
			om.seen(l)
		}
		out.change(l, time.Now())
	}
	return nil
}

// leaderPrinter prints leaders as a table or as JSON lines.
type leaderPrinter struct {
	w    io.Writer
	json bool
}

// leaderJSON is one leader as --json prints it.
type leaderJSON struct {
	Key        string     `json:"key"`
	Leader     string     `json:"leader"`
	Token      uint64     `json:"token,omitempty"` // without --watch: the leader's fencing token, if known
	Since      *time.Time `json:"since,omitempty"` // without --watch: when it won, if known
	Revision   uint64     `json:"revision,omitempty"`
	Written    *time.Time `json:"written,omitempty"`
	AgeSeconds *float64   `json:"age_seconds,omitempty"`
	Candidates []string   `json:"candidates,omitempty"` // without --watch: the live candidates' names
}

// withPriorities returns the candidates' names, each followed by ":N" when
// its priority N is not the default.
func withPriorities(candidates []election.Candidate) []string {
	out := names(candidates)
	for i, c := range candidates {
		if c.Priority != election.DefaultPriority {
			out[i] += ":" + strconv.Itoa(c.Priority)
		}
	}
	return out
}

// names returns the candidates' names.
func names(candidates []election.Candidate) []string {
	out := make([]string, len(candidates))
	for i, c := range candidates {
		out[i] = c.Name
	}
	return out
}

func toJSON(l election.Leader, now time.Time) leaderJSON {
	j := leaderJSON{Key: l.Key, Leader: l.Name}
	if l.Name != "" {
		written := l.Written.UTC()
		age := age(l, now).Seconds()
		j.Revision, j.Written, j.AgeSeconds = l.Revision, &written, &age
	}
	return j
}

// age is how long ago the leader's latest write reached the server; never
// negative, whatever the clocks say.
func age(l election.Leader, now time.Time) time.Duration {
	return max(now.Sub(l.Written), 0)
}

// columns are the table's cells for l: key, leader, revision, age.
func columns(l election.Leader, now time.Time) []string {
	if l.Name == "" {
		return []string{l.Key, "none", "-", "-"}
	}
	return []string{l.Key, l.Name, strconv.FormatUint(l.Revision, 10), age(l, now).Round(time.Millisecond).String()}
}

func (p *leaderPrinter) table(leaders []election.Leader, tenures map[string]tenure, candidates map[string][]election.Candidate, now time.Time) {
	if p.json {
		for _, l := range leaders {
			j := toJSON(l, now)
			if t, ok := tenures[l.Key]; ok {
				since := t.since.UTC()
				j.Token, j.Since = t.token, &since
			}
			j.Candidates = names(candidates[l.Key])
			p.line(j)
		}
		return
	}
	tw := tabwriter.NewWriter(p.w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "KEY\tLEADER\tTOKEN\tSINCE\tREVISION\tAGE\tCANDIDATES")
	for _, l := range leaders {
		c := columns(l, now)
		running := strings.Join(withPriorities(candidates[l.Key]), ",")
		if running == "" {
			running = "-"
		}
		token, since := "-", "-"
		if t, ok := tenures[l.Key]; ok {
			token, since = strconv.FormatUint(t.token, 10), t.since.UTC().Format(time.RFC3339)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", c[0], c[1], token, since, c[2], c[3], running)
	}
	tw.Flush()
}

func (p *leaderPrinter) watchers(bucket string, n int) {
	if p.json {
		p.line(struct {
			Bucket   string `json:"bucket"`
			Watchers int    `json:"watchers"`
		}{bucket, n})
		return
	}
	fmt.Fprintf(p.w, "watchers (processes): %d\n", n)
}

// watchFormat aligns the lines of --watch: time, key, leader, revision.
const watchFormat = "%-12s  %-20s  %-20s  %s\n"

func (p *leaderPrinter) header() {
	if !p.json {
		fmt.Fprintf(p.w, watchFormat, "TIME", "KEY", "LEADER", "REVISION")
	}
}

func (p *leaderPrinter) change(l election.Leader, now time.Time) {
	if p.json {
		p.line(toJSON(l, now))
		return
	}
	c := columns(l, now)
	fmt.Fprintf(p.w, watchFormat, now.Format("15:04:05.000"), c[0], c[1], c[2])
}

func (p *leaderPrinter) line(v any) { printJSONLine(p.w, v) }

// nodeJSON is a fleet's node as --json prints it.
type nodeJSON struct {
	Node       string            `json:"node"`
	Since      time.Time         `json:"since"`
	AgeSeconds float64           `json:"age_seconds"`
	Capacity   int               `json:"capacity"`
	Labels     map[string]string `json:"labels,omitempty"`
	Version    string            `json:"version,omitempty"`
	CanRun     []string          `json:"can_run"`
	Running    []string          `json:"running"`
}

// daemonJSON is a fleet's daemon as --json prints it.
type daemonJSON struct {
	Daemon    string     `json:"daemon"`
	Node      string     `json:"node"`
	State     string     `json:"state"`
	Token     uint64     `json:"token,omitempty"`
	Since     *time.Time `json:"since,omitempty"`
	Restarts  int        `json:"restarts,omitempty"`
	Restarted *time.Time `json:"restarted,omitempty"` // when it last exited by itself, by its node's clock
	LastError string     `json:"last_error,omitempty"`
}

// fleet prints the nodes and the daemons of the bucket's fleet.
// after says whether a table came before: a blank line separates them.
func (p *leaderPrinter) fleet(st fleet.Status, now time.Time, after bool) {
	running := map[string][]string{}
	for _, d := range st.Daemons {
		if d.State == fleet.Running || d.State == fleet.Revoking {
			running[d.Node] = append(running[d.Node], d.Name)
		}
	}
	if p.json {
		for _, m := range st.Members {
			p.line(nodeJSON{Node: m.Name, Since: m.Since.UTC(), AgeSeconds: max(now.Sub(m.Since), 0).Seconds(), Capacity: m.Capacity,
				Labels: m.Labels, Version: m.Version, CanRun: nonNil(m.Daemons), Running: nonNil(running[m.Name])})
		}
		for _, d := range st.Daemons {
			j := daemonJSON{Daemon: d.Name, Node: d.Node, State: daemonState(d, now), Token: d.Token, Restarts: d.Restarts, LastError: d.LastError}
			if !d.Since.IsZero() {
				since := d.Since.UTC()
				j.Since = &since
			}
			if !d.Restarted.IsZero() {
				restarted := d.Restarted.UTC()
				j.Restarted = &restarted
			}
			p.line(j)
		}
		return
	}
	tw := tabwriter.NewWriter(p.w, 0, 0, 2, ' ', 0)
	if after {
		fmt.Fprintln(tw)
	}
	fmt.Fprintln(tw, "NODE\tAGE\tCAPACITY\tRUNNING\tLABELS\tVERSION")
	for _, m := range st.Members {
		var labels []string
		for _, k := range slices.Sorted(maps.Keys(m.Labels)) {
			labels = append(labels, k+"="+m.Labels[k])
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d/%d\t%s\t%s\n", m.Name, max(now.Sub(m.Since), 0).Round(time.Second), m.Capacity,
			len(running[m.Name]), len(m.Daemons), orDash(strings.Join(labels, ",")), orDash(m.Version))
	}
	fmt.Fprintln(tw, "\nDAEMON\tNODE\tSTATE\tTOKEN\tFOR\tRESTARTS")
	for _, d := range st.Daemons {
		token, since := "-", "-"
		if d.Token != 0 {
			token = strconv.FormatUint(d.Token, 10)
		}
		if !d.Since.IsZero() {
			since = max(now.Sub(d.Since), 0).Round(time.Millisecond).String()
		}
		restarts := strconv.Itoa(d.Restarts)
		if d.LastError != "" {
			restarts += " (" + d.LastError + ")"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", d.Name, orDash(d.Node), daemonState(d, now), token, since, restarts)
	}
	tw.Flush()
}

// daemonState is the state status shows for d: its fleet state, or
// crash-looping for a running daemon that exited by itself lately.
func daemonState(d fleet.DaemonStatus, now time.Time) string {
	if d.CrashLooping(now) {
		return "crash-looping"
	}
	return string(d.State)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}
