package cli

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math"
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
	"github.com/kvelect/election/mirror"
	"github.com/kvelect/election/promelection"
	"github.com/nats-io/nats.go/jetstream"
)

const statusAbout = `Usage:
  election status [--bucket B] [--key K] [--json]
  election status --key K --watch [--bucket B] [--json] [--metrics ADDR]
  election status --mirror M [--bucket B] [--key K [--watch]] [--json]

Prints who leads each key of the bucket B that has a leader or a candidate,
or the key K (LEADER "none" when nobody holds it): the leader's name, its
fencing TOKEN (the revision of the claim that won, the KVELECT_TOKEN of the
leader's command) and SINCE when it has led (by the server's clock), its
latest write's REVISION (its claim or a renewal), the AGE of that write by
the server's clock, and the names of the key's live candidates (the leader
among them, each with ":N" if its priority N is not 1): the elections for
the key running in any process. Names are unique per key: a candidate
started under the name of a live one is refused (run, sidecar and agent
exit 1 naming both processes), so each name listed is one process (its
host, pid and connection in --json's "candidate_writers"). A warning
follows the table for a candidate whose record does not name its process
(a kvelect older than that check): a second candidate of its name would not
be refused, and would show as one. TOKEN and SINCE come from the bucket's
leadership history (election bucket create makes it; election run records in
it): an observer that started after the claim cannot learn them from the
key, which keeps only its latest write. They show "-" when the bucket has no
history, when it cannot be read, or when the leader's win is not recorded
(yet, or it ran with --history=false). A job's key (election run --once)
shows no leader but its done mark, "done by NAME at T, until U": the key's
own, or, with --done-for, the longer one the history keeps (shown even
after the key's own has aged out). A stopped
candidate drops out at once, a crashed one a TTL after its last write. The
last line counts the watchers on the bucket, one per process that
opened it with the library's OpenBucket (and one per election made without
a Bucket), so roughly the running candidates' processes. A process that
died without closing its watcher still counts until the server drops its
consumer, 5-6 s later; a watcher the NATS client recreated (after a missed
message or heartbeat) deletes its old consumer without waiting, so the
count can be one high for a moment.

When the bucket lives in a cluster, a line before the table names it, each
candidate shows as NAME@CLUSTER, the cluster its connection was on when it
started (run, sidecar and the demo publish it in their metadata under
"cluster"), and a warning line follows the table for each candidate outside
the bucket's cluster, such as
  warning: key job: w3 (cluster C3, round trip 52.4ms) leads only while cluster C1 is reachable
since a bucket lives in one cluster and a leader must renew there; the
round trip is the median of the candidate's recent ones to the bucket, as
its record says. On a lone server none of this shows.

If the bucket holds a fleet (election agent), its nodes and daemons are
listed instead of their keys: each node's age, capacity, priority (a
PRIORITY column, such as 1 or "0 prefer-higher", once any node has one;
see agent --priority), daemons running out of those it can run, labels and
version; each daemon's node, state
(assigning, running, crash-looping, revoking, stopped), fencing token, time
in that run, and restarts with the last error. crash-looping is a running
daemon that exited by itself less than a minute ago: its node starts it
again after a backoff (a command not found, a daemon that fails at start).

--mirror M reads M, a KV mirror of the bucket B (one made with
jetstream.KeyValueConfig{Mirror: &jetstream.StreamSource{Name: "B"}}),
instead of B: for observers in another region, where the mirror is near and
survives a cut from B's cluster. A mirror may be stale by any amount: the
output starts with
  from mirror M of bucket B: not authoritative, may be stale; lag 0 messages, last heard from bucket B 120ms ago
(the server's count of B's messages the mirror lacks, and how long ago it
last heard from B), and --watch shows the lag on each change. It reads
nothing of B itself (but B's TTL, once, if M keeps keys forever): TOKEN and
SINCE show "-", the watchers are not counted, and the bucket's cluster is
not known. Nothing that decides who leads ever reads a mirror. A bucket that
is not a mirror of B is an error.

--watch prints K's leader, then each change (a new leader, or none) until
SIGINT or SIGTERM, and exits 0. Renewals are not changes.

--json prints one JSON object per line instead of the table:
  {"key":"K","leader":"NAME","token":5,"since":"2026-...Z","revision":7,"written":"2026-...Z","age_seconds":1.2,"candidates":["NAME","B"]}
with "leader":"" when nobody holds K, and no "token" nor "since" when they
are not known; for a fleet, one line per node and
per daemon:
  {"node":"N","since":"...","age_seconds":9.5,"capacity":1,"priority":1,"prefer_higher":true,"labels":{"zone":"a"},"can_run":["x","y"],"running":["x"]}
(no "priority" at 0, no "prefer_higher" when false)
  {"daemon":"x","node":"N","state":"running","token":42,"since":"...","restarts":1,"restarted":"...","last_error":"..."}
and, without --watch, a last line
  {"bucket":"B","watchers":3}
with "cluster":"C1" when the bucket lives in a cluster, in which case the
leader lines also give "bucket_cluster", the leader's "cluster",
"candidate_clusters" (name to cluster) and the "warnings"; they give
"candidate_round_trips_ms" (name to milliseconds) for the candidates that
measured one, "candidate_writers" (name to the process that writes its
record), and the unchecked names' "warnings". With --mirror,
every line has "authoritative":false and "mirror":"M", each --watch line
also the mirror's "lag_messages" and "heard_seconds_ago", and the last line
is instead
  {"mirror":"M","bucket":"B","authoritative":false,"note":"from mirror M of bucket B: ...","lag_messages":0,"heard_seconds_ago":0.12}

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
	mirror  string // the mirror of bucket to read instead of it, or ""
}

// statusCommand defines the flags of "election status" and returns them
// with the function that runs it.
func statusCommand() (*flagSet, runFunc) {
	fs := newFlagSet("election status", statusAbout)
	var cfg statusConfig
	cfg.conn.add(fs)
	fs.bucketVar(&cfg.bucket, "the election bucket's `NAME`")
	fs.StringVar(&cfg.key, "key", "", "only this election `KEY`; default every key that has a leader")
	fs.BoolVar(&cfg.watch, "watch", false, "print each change of --key's leader until interrupted")
	fs.BoolVar(&cfg.json, "json", false, "print one JSON object per line")
	fs.StringVar(&cfg.metrics, "metrics", "", "with --watch, serve /metrics and /healthz over HTTP on `ADDR`, HOST:PORT")
	fs.Var(bucketFlag{&cfg.mirror}, "mirror", "read the KV mirror `NAME` of the bucket instead of the bucket: for observers elsewhere; not authoritative, maybe stale")
	return fs, func(args []string, stdout, stderr io.Writer) int {
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
		src, err := openObserved(openCtx, js, cfg.bucket, cfg.mirror)
		if err != nil {
			return fail(stderr, fs.path, deniedOr(ctx, err))
		}
		// Count the watchers before this process adds its own; a mirror's
		// observer reads nothing of the bucket.
		watchers := 0
		if src.mirror == nil {
			if watchers, err = countWatchers(openCtx, js, cfg.bucket); err != nil {
				return fail(stderr, fs.path, deniedOr(ctx, err))
			}
		}
		b, err := election.OpenBucket(openCtx, src.kv)
		if err != nil {
			return fail(stderr, fs.path, deniedOr(ctx, err))
		}
		defer b.Close()

		out := leaderPrinter{w: stdout, json: cfg.json, mirror: src.mirror, ctx: ctx, ttl: b.TTL()}
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
			return ExitOK
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
		var tenures map[string]history.Event
		if src.mirror == nil { // the history lives with the bucket
			tenures = readTenures(openCtx, &cfg.conn, js, cfg.bucket, leaders)
		}
		out.marks, leaders = doneMarks(openCtx, &cfg.conn, js, cfg.bucket, b.TTL(), leaders, cfg.key, src.mirror == nil, now)
		hasFleet := len(st.Members) > 0 || len(st.Daemons) > 0
		printTable := len(leaders) > 0 || !hasFleet
		if src.mirror != nil && !cfg.json {
			out.mirrorLine()
		}
		topo := topologyOf(cfg.bucket, src.cluster, candidates)
		if printTable {
			out.table(leaders, tenures, candidates, now, topo)
		}
		if hasFleet {
			out.fleet(st, now, printTable)
			if !cfg.json {
				out.fleetWarnings(st, topo)
			}
		}
		if src.mirror != nil {
			if cfg.json {
				out.mirrorLine()
			}
			return ExitOK
		}
		out.watchers(cfg.bucket, src.cluster, watchers)
		return ExitOK
	}
}

// readTenures returns, by key, the recorded win of each leader's current
// tenure (history.CurrentWin). It returns what it could read: nothing if
// the bucket has no history or it cannot be read.
func readTenures(ctx context.Context, conn *connFlags, js jetstream.JetStream, bucket string, leaders []election.Leader) map[string]history.Event {
	ctx, done := conn.historyContext(ctx)
	defer done()
	h, err := history.Open(ctx, js, bucket)
	if err != nil {
		return nil
	}
	tenures := map[string]history.Event{}
	for _, l := range leaders {
		if l.Name == "" {
			continue
		}
		events, err := h.Events(ctx, l.Key, time.Time{})
		if err != nil {
			return tenures
		}
		if t, ok := history.CurrentWin(l, events); ok {
			tenures[l.Key] = t
		}
	}
	return tenures
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
func watchLeader(ctx context.Context, b *election.Bucket, key string, out *leaderPrinter, om *promelection.ObserverCollector) error {
	changes, err := b.Observe(ctx, key)
	if err != nil {
		return err
	}
	out.header()
	for l := range changes {
		if om != nil {
			om.Seen(l)
		}
		out.change(l, time.Now())
	}
	return nil
}

// leaderPrinter prints leaders as a table or as JSON lines.
type leaderPrinter struct {
	w    io.Writer
	json bool
	// mirror is the mirror read instead of the bucket, whose label and lag
	// go with what is printed; nil: the bucket itself.
	mirror *mirror.Mirror
	ctx    context.Context // bounds the reads of the mirror's lag
	// ttl is the bucket's, and marks the done marks to show instead of
	// leaders, by key (done_marks.go).
	ttl   time.Duration
	marks map[string]doneMark
}

// leaderJSON is one leader as --json prints it.
type leaderJSON struct {
	Key        string     `json:"key"`
	Leader     string     `json:"leader"`
	Done       *doneMark  `json:"done,omitempty"`  // a job's done mark (leader ""): who ran it, when, until when it stands
	Token      uint64     `json:"token,omitempty"` // without --watch: the leader's fencing token, if known
	Since      *time.Time `json:"since,omitempty"` // without --watch: when it won, if known
	Revision   uint64     `json:"revision,omitempty"`
	Written    *time.Time `json:"written,omitempty"`
	AgeSeconds *float64   `json:"age_seconds,omitempty"`
	Candidates []string   `json:"candidates,omitempty"` // without --watch: the live candidates' names
	// Without --watch, when a cluster is known: the bucket's, the leader's,
	// each candidate's by name, and the warnings for those outside the
	// bucket's.
	BucketCluster     string            `json:"bucket_cluster,omitempty"`
	Cluster           string            `json:"cluster,omitempty"`
	CandidateClusters map[string]string `json:"candidate_clusters,omitempty"`
	Warnings          []string          `json:"warnings,omitempty"`
	// Without --watch: each candidate's median recent round trip to the
	// bucket, by name, as its record says (election.Candidate.RoundTrip).
	RoundTripsMS map[string]float64 `json:"candidate_round_trips_ms,omitempty"`
	// Without --watch: each candidate's clock rate against the stream
	// leader's, by name, as its record says (election.Candidate.ClockRate:
	// 1 when they agree), for those that measured one.
	ClockRates map[string]float64 `json:"candidate_clock_rates,omitempty"`
	// Without --watch: the process of each candidate whose record names it,
	// by name (election.Writer.String).
	Writers map[string]string `json:"candidate_writers,omitempty"`
	// Without --watch: why each candidate whose health check fails does
	// (election.Candidate.Unhealthy), by name: it claims nothing.
	Unhealthy map[string]string `json:"candidate_unhealthy,omitempty"`
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

func (p *leaderPrinter) toJSON(l election.Leader, now time.Time) leaderJSON {
	if m, ok := p.mark(l); ok {
		return leaderJSON{Key: l.Key, Done: &m}
	}
	j := leaderJSON{Key: l.Key, Leader: l.Name}
	if l.Name != "" {
		written := l.Written.UTC()
		age := seconds(age(l, now))
		j.Revision, j.Written, j.AgeSeconds = l.Revision, &written, &age
	}
	return j
}

// seconds is d in seconds, to the millisecond: a JSON number without float
// noise (1.995, not 1.9952096259999998).
func seconds(d time.Duration) float64 {
	return math.Round(d.Seconds()*1000) / 1000
}

// age is how long ago the leader's latest write reached the server; never
// negative, whatever the clocks say.
func age(l election.Leader, now time.Time) time.Duration {
	return max(now.Sub(l.Written), 0)
}

// mark returns the done mark to show for l's key instead of a leader, if
// there is one.
func (p *leaderPrinter) mark(l election.Leader) (doneMark, bool) {
	if m, ok := p.marks[l.Key]; ok {
		return m, true
	}
	return keyMark(l, p.ttl)
}

// columns are the table's cells for l: key, leader, revision, age.
func (p *leaderPrinter) columns(l election.Leader, now time.Time) []string {
	if m, ok := p.mark(l); ok {
		return []string{l.Key, m.String(), "-", "-"}
	}
	if l.Name == "" {
		return []string{l.Key, "none", "-", "-"}
	}
	return []string{l.Key, l.Name, strconv.FormatUint(l.Revision, 10), age(l, now).Round(time.Millisecond).String()}
}

func (p *leaderPrinter) table(leaders []election.Leader, tenures map[string]history.Event, candidates map[string][]election.Candidate, now time.Time, topo topology) {
	if p.json {
		for _, l := range leaders {
			j := p.toJSON(l, now)
			if t, ok := tenures[l.Key]; ok {
				since := t.At.UTC()
				j.Token, j.Since = t.Token, &since
			}
			j.Candidates = names(candidates[l.Key])
			for _, c := range candidates[l.Key] {
				if c.RoundTrip > 0 {
					if j.RoundTripsMS == nil {
						j.RoundTripsMS = map[string]float64{}
					}
					j.RoundTripsMS[c.Name] = float64(c.RoundTrip.Microseconds()) / 1000
				}
				if c.ClockRate > 0 {
					if j.ClockRates == nil {
						j.ClockRates = map[string]float64{}
					}
					j.ClockRates[c.Name] = c.ClockRate
				}
				if c.Unhealthy != "" {
					if j.Unhealthy == nil {
						j.Unhealthy = map[string]string{}
					}
					j.Unhealthy[c.Name] = c.Unhealthy
				}
			}
			for _, c := range candidates[l.Key] {
				if c.Writer.Instance != "" {
					if j.Writers == nil {
						j.Writers = map[string]string{}
					}
					j.Writers[c.Name] = c.Writer.String()
				}
			}
			if topo.shown {
				j.BucketCluster = topo.cluster
				j.Cluster = clusterOfCandidate(candidates[l.Key], l.Name)
				j.CandidateClusters = map[string]string{}
				for _, c := range candidates[l.Key] {
					if c.Metadata[clusterKey] != "" {
						j.CandidateClusters[c.Name] = c.Metadata[clusterKey]
					}
				}
				j.Warnings = topo.warnings(l.Key, l.Name, candidates[l.Key])
			}
			j.Warnings = append(j.Warnings, uncheckedNames(l.Key, candidates[l.Key])...)
			j.Warnings = append(j.Warnings, failingChecks(l.Key, candidates[l.Key])...)
			p.line(j)
		}
		return
	}
	if topo.cluster != "" {
		fmt.Fprintf(p.w, "bucket %s lives in cluster %s\n", topo.bucket, topo.cluster)
	}
	tw := tabwriter.NewWriter(p.w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "KEY\tLEADER\tTOKEN\tSINCE\tREVISION\tAGE\tCANDIDATES")
	var warnings []string
	for _, l := range leaders {
		c := p.columns(l, now)
		shown := withPriorities(candidates[l.Key])
		if topo.shown {
			for i, cand := range candidates[l.Key] {
				if cluster := cand.Metadata[clusterKey]; cluster != "" {
					shown[i] += "@" + cluster
				}
			}
			warnings = append(warnings, topo.warnings(l.Key, l.Name, candidates[l.Key])...)
		}
		warnings = append(warnings, uncheckedNames(l.Key, candidates[l.Key])...)
		warnings = append(warnings, failingChecks(l.Key, candidates[l.Key])...)
		running := strings.Join(shown, ",")
		if running == "" {
			running = "-"
		}
		token, since := "-", "-"
		if t, ok := tenures[l.Key]; ok {
			token, since = strconv.FormatUint(t.Token, 10), t.At.UTC().Format(time.RFC3339)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", c[0], c[1], token, since, c[2], c[3], running)
	}
	tw.Flush()
	for _, w := range warnings {
		fmt.Fprintln(p.w, "warning: "+w)
	}
}

func (p *leaderPrinter) watchers(bucket, cluster string, n int) {
	if p.json {
		p.line(struct {
			Bucket   string `json:"bucket"`
			Cluster  string `json:"cluster,omitempty"`
			Watchers int    `json:"watchers"`
		}{bucket, cluster, n})
		return
	}
	fmt.Fprintf(p.w, "watchers (processes): %d\n", n)
}

// watchFormat aligns the lines of --watch: time, key, leader, revision;
// watchMirrorFormat adds the mirror's lag.
const (
	watchFormat       = "%-12s  %-20s  %-20s  %s\n"
	watchMirrorFormat = "%-12s  %-20s  %-20s  %-8s  %s\n"
)

func (p *leaderPrinter) header() {
	if p.json {
		return
	}
	if p.mirror != nil {
		fmt.Fprintln(p.w, notAuthoritative(p.mirror))
		fmt.Fprintf(p.w, watchMirrorFormat, "TIME", "KEY", "LEADER", "REVISION", "MIRROR")
		return
	}
	fmt.Fprintf(p.w, watchFormat, "TIME", "KEY", "LEADER", "REVISION")
}

func (p *leaderPrinter) change(l election.Leader, now time.Time) {
	var lag mirror.Lag
	if p.mirror != nil {
		lag = p.readLag()
	}
	if p.json {
		if p.mirror == nil {
			p.line(p.toJSON(l, now))
			return
		}
		m := mirrorJSONOf(p.mirror, lag)
		p.line(struct {
			leaderJSON
			Lag          uint64   `json:"lag_messages"`
			HeardSeconds *float64 `json:"heard_seconds_ago,omitempty"`
			Error        string   `json:"mirror_error,omitempty"`
		}{p.toJSON(l, now), m.Lag, m.HeardSeconds, m.Error})
		return
	}
	c := p.columns(l, now)
	if p.mirror != nil {
		fmt.Fprintf(p.w, watchMirrorFormat, now.Format("15:04:05.000"), c[0], c[1], c[2], describeMirrorLag(lag, p.mirror.Bucket()))
		return
	}
	fmt.Fprintf(p.w, watchFormat, now.Format("15:04:05.000"), c[0], c[1], c[2])
}

// readLag reads the mirror's lag, or says it could not in its Error.
func (p *leaderPrinter) readLag() mirror.Lag {
	ctx, cancel := context.WithTimeout(p.ctx, bucketTimeout)
	defer cancel()
	lag, err := p.mirror.Lag(ctx)
	if err != nil {
		return mirror.Lag{Heard: -1, Error: err.Error()}
	}
	return lag
}

// mirrorLine prints where what status shows comes from, and the mirror's
// lag: a line of text, or of JSON.
func (p *leaderPrinter) mirrorLine() {
	lag := p.readLag()
	if p.json {
		printJSONLine(p.w, mirrorJSONOf(p.mirror, lag))
		return
	}
	fmt.Fprintf(p.w, "%s; %s\n", notAuthoritative(p.mirror), describeMirrorLag(lag, p.mirror.Bucket()))
}

// line prints v, a struct, as a JSON line; read from a mirror, with
// "authoritative":false and the mirror's name added.
func (p *leaderPrinter) line(v any) {
	if p.mirror == nil {
		printJSONLine(p.w, v)
		return
	}
	data, _ := json.Marshal(v) // plain structs: cannot fail
	tail, _ := json.Marshal(p.mirror.Name())
	data = append(data[:len(data)-1], `,"authoritative":false,"mirror":`...)
	data = append(append(data, tail...), '}')
	fmt.Fprintf(p.w, "%s\n", data)
}

// topology is where the bucket and the candidates of its keys are, as far
// as status knows.
type topology struct {
	bucket  string
	cluster string // the bucket's: "" on a lone server or unknown (a mirror)
	shown   bool   // the bucket or a candidate is in a cluster: show them
}

// topologyOf is the topology of the bucket in cluster with candidates.
func topologyOf(bucket, cluster string, candidates map[string][]election.Candidate) topology {
	t := topology{bucket: bucket, cluster: cluster, shown: cluster != ""}
	for _, cs := range candidates {
		for _, c := range cs {
			t.shown = t.shown || c.Metadata[clusterKey] != ""
		}
	}
	return t
}

// warnings says, for each of key's candidates in a cluster other than the
// bucket's, that it can lead only while the bucket's cluster is reachable:
// its claims and renewals go there.
func (t topology) warnings(key, leader string, candidates []election.Candidate) []string {
	var out []string
	for _, c := range candidates {
		cluster := c.Metadata[clusterKey]
		if t.cluster == "" || cluster == "" || cluster == t.cluster {
			continue
		}
		verb := "can lead"
		if c.Name == leader {
			verb = "leads"
		}
		where := "cluster " + cluster
		if c.RoundTrip > 0 {
			where += ", round trip " + c.RoundTrip.Round(time.Millisecond/10).String()
		}
		out = append(out, fmt.Sprintf("key %s: %s (%s) %s only while cluster %s is reachable", key, c.Name, where, verb, t.cluster))
	}
	return out
}

// failingChecks says, for each of key's candidates whose health check
// fails (election.WithHealthCheck), that it claims nothing, and why.
func failingChecks(key string, candidates []election.Candidate) []string {
	var out []string
	for _, c := range candidates {
		if c.Unhealthy != "" {
			out = append(out, fmt.Sprintf("key %s: %s claims nothing while its health check fails: %s", key, c.Name, c.Unhealthy))
		}
	}
	return out
}

// uncheckedNames says, for each of key's candidates whose record does not
// name its process (a kvelect that predates writer records wrote it), that
// a second live candidate of its name would not be refused: both would
// write the one record, and show as one candidate.
func uncheckedNames(key string, candidates []election.Candidate) []string {
	var out []string
	for _, c := range candidates {
		if c.Writer.Instance == "" {
			out = append(out, fmt.Sprintf("key %s: %s runs a kvelect whose candidate record does not name its process: a second live candidate named %s would not be refused, and would show here as one", key, c.Name, c.Name))
		}
	}
	return out
}

// fleetWarnings says, for each node of the fleet labelled with a cluster
// other than the bucket's, that it runs daemons only while the bucket's
// cluster is reachable.
func (p *leaderPrinter) fleetWarnings(st fleet.Status, t topology) {
	for _, m := range st.Members {
		if cluster := m.Labels[clusterKey]; t.cluster != "" && cluster != "" && cluster != t.cluster {
			fmt.Fprintf(p.w, "warning: node %s (cluster %s) runs daemons only while cluster %s is reachable\n", m.Name, cluster, t.cluster)
		}
	}
}

// clusterOfCandidate is the cluster of the candidate called name, or "".
func clusterOfCandidate(candidates []election.Candidate, name string) string {
	for _, c := range candidates {
		if c.Name == name {
			return c.Metadata[clusterKey]
		}
	}
	return ""
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
			p.line(nodeJSON{Node: m.Name, Since: m.Since.UTC(), AgeSeconds: seconds(max(now.Sub(m.Since), 0)), Capacity: m.Capacity,
				Priority: m.Priority, Prefer: m.PreferHigher, Labels: m.Labels, Version: m.Version, CanRun: nonNil(m.Daemons), Running: nonNil(running[m.Name]),
				Unhealthy: m.Unhealthy})
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
	// Priorities get a column only where a node has one.
	prioritized := slices.ContainsFunc(st.Members, func(m fleet.Member) bool { return m.Priority != 0 || m.PreferHigher })
	priority := func(m fleet.Member) string {
		switch {
		case !prioritized:
			return ""
		case m.PreferHigher:
			return fmt.Sprintf("%d prefer-higher\t", m.Priority)
		}
		return fmt.Sprintf("%d\t", m.Priority)
	}
	header := "NODE\tAGE\tCAPACITY\t"
	if prioritized {
		header += "PRIORITY\t"
	}
	fmt.Fprintln(tw, header+"RUNNING\tLABELS\tVERSION")
	for _, m := range st.Members {
		var labels []string
		for _, k := range slices.Sorted(maps.Keys(m.Labels)) {
			labels = append(labels, k+"="+m.Labels[k])
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s%d/%d\t%s\t%s\n", m.Name, max(now.Sub(m.Since), 0).Round(time.Second), m.Capacity,
			priority(m), len(running[m.Name]), len(m.Daemons), orDash(strings.Join(labels, ",")), orDash(m.Version))
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
	for _, m := range st.Members {
		for _, d := range slices.Sorted(maps.Keys(m.Unhealthy)) {
			fmt.Fprintf(p.w, "warning: node %s does not offer daemon %s while its health check fails: %s\n", m.Name, d, m.Unhealthy[d])
		}
	}
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
