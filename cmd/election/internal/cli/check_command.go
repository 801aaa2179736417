package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"os"
	"os/signal"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/kvelect/election"
	"github.com/kvelect/election/fleet"
	"github.com/kvelect/election/history"
	"github.com/nats-io/nats.go/jetstream"
)

const checkAbout = `Usage:
  election check --key K [--key K2 ...] [--fleet] [--bucket B]
                 [--format nagios|json|prometheus|text] [--namespace NS] [--timeout 10s]
  election check --key K [--key K2 ...] --ran-within DURATION [--bucket B] [--format ...]

For monitoring systems that poll, in the shape of nats server check: checks
the bucket B and prints one result.

  --key K   K has a leader that renews on time: WARNING when its latest
            write is older than the renewal interval plus a quarter of the
            leader's retry window (a renewal is late), CRITICAL past its
            validity deadline (the leader has stood down by its own clock)
            or without a leader. At TTL 5 s: WARNING past 3.979 s,
            CRITICAL past 4.208 s
  --fleet   every daemon of the bucket's fleet runs on a node: CRITICAL if
            one runs nowhere (stopped) or no node is live, WARNING while one
            is being assigned
  --key K --ran-within D
            K is a job of election run --once: a run of it succeeded within
            D, as the bucket's leadership history records it: CRITICAL when
            none did, WARNING when one did but the latest run failed (its
            retry may be under way). For a nightly job, 25h

With --ran-within, --format prometheus also prints, per key,
NS_last_success_timestamp_seconds (0 if none), NS_last_run_failed and
NS_ran_within_seconds, for the alert rules KvelectJobDidNotRun and
KvelectJobFailed (deploy/prometheus/kvelect-rules.yml): run the check from a
timer into node_exporter's textfile directory.

--format nagios (the default) prints one line, STATUS, the checks and their
performance data after "|"; json prints an object with status, ok, warning,
critical and perf_data; prometheus prints the text exposition format,
NS_status_code (0 OK, 1 WARNING, 2 CRITICAL, 3 UNKNOWN) and a gauge per
performance datum, named NS_... (NS: --namespace, default kvelect_check);
text prints one line per check.

The renewal's age compares the server's time of the leader's latest write
with this machine's clock: skew between them adds to it. The limits assume
the default campaign interval, three quarters of the TTL (what election run,
sidecar and agent use): a candidate's record does not say its interval, so
a program that sets a longer one with election.WithCampaignInterval shows
as late.

Exit status, as Nagios plugins do: 0 OK, 1 WARNING, 2 CRITICAL, 3 UNKNOWN
(the server unreachable, the bucket missing or a permission denied, and
bad flags).
`

// perfDatum is one measurement of a check, with its thresholds (0: none).
type perfDatum struct {
	Name     string  `json:"name"`
	Value    float64 `json:"value"`
	Warning  float64 `json:"warning,omitempty"`
	Critical float64 `json:"critical,omitempty"`
	Unit     string  `json:"unit,omitempty"`
	help     string
}

// checkResult is the outcome of election check.
type checkResult struct {
	Name string `json:"name"`
	verdict
	OK       []string    `json:"ok,omitempty"`
	PerfData []perfDatum `json:"perf_data,omitempty"`
}

func (r *checkResult) ok(format string, args ...any) {
	r.OK = append(r.OK, fmt.Sprintf(format, args...))
}

// perf adds p, its figures to the millisecond (to the thousandth): no
// float noise in the JSON output or the perf data.
func (r *checkResult) perf(p perfDatum) {
	for _, v := range []*float64{&p.Value, &p.Warning, &p.Critical} {
		*v = math.Round(*v*1000) / 1000
	}
	r.PerfData = append(r.PerfData, p)
}

// checkCommand defines the flags of "election check" and returns them with
// the function that runs it.
func checkCommand() (*flagSet, runFunc) {
	fs := newFlagSet("election check", checkAbout)
	var conn connFlags
	conn.add(fs)
	var bucket, format, namespace string
	var keys multiFlag
	var checkFleet bool
	var timeout, ranWithin time.Duration
	fs.bucketVar(&bucket, "the election bucket's `NAME`")
	fs.Var(&keys, "key", "an election `KEY` that must have a live leader; repeatable")
	fs.BoolVar(&checkFleet, "fleet", false, "check that every daemon of the bucket's fleet runs on a node")
	fs.Var(spanFlag{&ranWithin}, "ran-within", "check instead that each --key, a job of run --once, ran successfully within `DURATION` (such as 25h or 1d)")
	fs.StringVar(&format, "format", "nagios", "output `FORMAT`: nagios, json, prometheus or text")
	fs.StringVar(&namespace, "namespace", "kvelect_check", "with --format prometheus, the metrics' name prefix `NS`")
	fs.DurationVar(&timeout, "timeout", bucketTimeout, "`DURATION` the check may take")
	return fs, func(args []string, stdout, stderr io.Writer) int {
		usage, code, ok := fs.parseAsCheck(args, stdout, stderr)
		if !ok {
			return code
		}
		switch {
		case fs.NArg() > 0:
			return usage("unexpected argument %q", fs.Arg(0))
		case len(keys) == 0 && !checkFleet:
			return usage("nothing to check: give --key K, --fleet, or both")
		case ranWithin > 0 && len(keys) == 0:
			return usage("--ran-within %s without --key: give the key of the job, --key K", formatSpan(ranWithin))
		case format != "nagios" && format != "json" && format != "prometheus" && format != "text":
			return usage("--format %q: want nagios, json, prometheus or text", format)
		case !promName.MatchString(namespace):
			return usage("--namespace %q: want letters, digits and _, not starting with a digit", namespace)
		case timeout <= 0:
			return usage("--timeout %v: want a duration above 0", timeout)
		}
		for _, k := range keys {
			if err := election.CheckKey(k); err != nil {
				return usage("%v", err)
			}
		}
		if err := conn.check(); err != nil {
			return usage("%v", err)
		}

		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		defer stop()
		ctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		r := &checkResult{Name: bucket}
		runChecks(ctx, &conn, r, bucket, keys, checkFleet, ranWithin)
		r.finish()
		printCheck(stdout, r, format, namespace)
		return r.Code
	}
}

// runChecks connects and runs the checks into r.
func runChecks(ctx context.Context, conn *connFlags, r *checkResult, bucket string, keys []string, checkFleet bool, ranWithin time.Duration) {
	unknown := r.unknown
	ctx, stopWatching := conn.watchDenials(ctx, roleObserver)
	defer stopWatching()
	if ranWithin == 0 {
		conn.quietHistory() // the history only tells how long a job's mark lasts (jobMark)
	}
	nc, js, err := conn.connect("election check")
	if err != nil {
		unknown(deniedOr(ctx, err))
		return
	}
	defer nc.Close()
	kv, err := openBucket(ctx, js, bucket)
	if err != nil {
		unknown(deniedOr(ctx, err))
		return
	}
	b, err := election.OpenBucket(ctx, kv)
	if err != nil {
		unknown(deniedOr(ctx, inDomain(js, err)))
		return
	}
	defer b.Close()
	ttl := b.TTL()
	now := serverTime(ctx, kv) // the clock the write times are stamped by
	late, lapsed := renewalLimits(ttl, 0)
	if ranWithin > 0 { // the keys are jobs of run --once (check_ranwithin.go)
		checkRanWithin(ctx, js, r, bucket, keys, ranWithin, now)
		keys = nil
	}
	for _, key := range keys {
		l, err := b.Leader(ctx, key)
		if err != nil {
			unknown(deniedOr(ctx, inDomain(js, err)))
			return
		}
		hasLeader := perfDatum{Name: "has_leader:" + key, Critical: 1, help: "1 if the key has a leader, else 0"}
		if mark, ok := jobMark(ctx, conn, js, bucket, l, ttl, now()); ok { // a job's key: --ran-within checks it
			r.perf(hasLeader)
			r.ok("%s has no leader: it is a job's key, %s (check a job with --ran-within)", key, mark)
			continue
		}
		if l.Name == "" {
			r.perf(hasLeader)
			r.critical("%s", noLeader(ctx, b, key))
			continue
		}
		hasLeader.Value = 1
		age := max(now().Sub(l.Written), 0)
		r.perf(hasLeader)
		r.perf(perfDatum{Name: "renew_age:" + key, Value: age.Seconds(), Warning: late.Seconds(), Critical: lapsed.Seconds(), Unit: "s",
			help: "seconds since the leader's latest write (claim or renewal)"})
		switch {
		case age > lapsed:
			r.critical("%s: %s last renewed %v ago, past its validity %v: it has stood down", key, l.Name, age.Round(time.Millisecond), lapsed.Round(time.Millisecond))
		case age > late:
			r.warn("%s: %s last renewed %v ago: its renewal is late (due by %v)", key, l.Name, age.Round(time.Millisecond), late.Round(time.Millisecond))
		default:
			r.ok("%s led by %s, renewed %v ago", key, l.Name, age.Round(time.Millisecond))
		}
	}
	if checkFleet {
		st, err := fleet.ReadStatus(ctx, b)
		if err != nil {
			unknown(deniedOr(ctx, inDomain(js, err)))
			return
		}
		var running, assigning, stopped int
		for _, d := range st.Daemons {
			switch d.State {
			case fleet.Running, fleet.Revoking:
				running++
			case fleet.Assigning:
				assigning++
				r.warn("daemon %s is being assigned to %s", d.Name, d.Node)
			default:
				stopped++
				r.critical("daemon %s runs nowhere", d.Name)
			}
		}
		switch {
		case len(st.Members) == 0:
			r.critical("no live node in the fleet")
		case stopped == 0 && assigning == 0:
			r.ok("%d daemons run on %d nodes", running, len(st.Members))
		}
		r.perf(perfDatum{Name: "fleet_nodes", Value: float64(len(st.Members)), Critical: 1, help: "live nodes of the fleet"})
		r.perf(perfDatum{Name: "fleet_daemons_running", Value: float64(running), help: "daemons running on a node"})
		r.perf(perfDatum{Name: "fleet_daemons_assigning", Value: float64(assigning), help: "daemons being assigned to a node"})
		r.perf(perfDatum{Name: "fleet_daemons_stopped", Value: float64(stopped), help: "daemons that run nowhere"})
	}
}

// jobMark says who marked l's key done, when, and until when it keeps the
// job from running again, by the servers' clock at now, if a done mark
// holds the key: the mark on the key, or, since a run marked for longer
// than the bucket's TTL (--done-for) records its mark's end in the bucket's
// history, the history's mark when it lasts longer, even once the key's
// own has aged out and nobody holds the key. When the history exists but
// cannot be read, only the key's own mark is known, and said as such.
func jobMark(ctx context.Context, conn *connFlags, js jetstream.JetStream, bucket string, l election.Leader, ttl time.Duration, now time.Time) (string, bool) {
	m, marked := keyMark(l, ttl)
	if !marked && l.Name != "" {
		return "", false // a leader holds the key
	}
	ctx, done := conn.historyContext(ctx)
	defer done()
	h, err := history.Open(ctx, js, bucket)
	if errors.Is(err, history.ErrNoHistory) {
		return m.String(), marked // no run log: the mark on the key is all there is
	}
	var events []history.Event
	if err == nil {
		events, err = h.Events(ctx, l.Key, time.Time{})
	}
	if err != nil {
		if !marked {
			return "", false
		}
		return fmt.Sprintf("done by %s at %s, until at least %s (the key's own mark; the history, which records a longer --done-for, cannot be read: %v)",
			m.By, m.At.UTC().Format(time.RFC3339), m.Until.UTC().Format(time.RFC3339), message(deniedOr(ctx, err))), true
	}
	if lm, ok := logMark(events, now); ok && lm.Until.After(m.Until) {
		return lm.String(), true
	}
	return m.String(), marked
}

// promName is a valid Prometheus metric name.
var promName = regexp.MustCompile(`^[a-zA-Z_][a-zA-Z0-9_]*$`)

// printCheck prints r in format.
func printCheck(w io.Writer, r *checkResult, format, namespace string) {
	switch format {
	case "json":
		writeJSONIndent(w, r)
	case "prometheus":
		printCheckPrometheus(w, r, namespace)
	case "text":
		fmt.Fprintf(w, "election check %s: %s\n", r.Name, r.Status)
		for _, l := range []struct {
			label string
			items []string
		}{{"unknown", r.Unknowns}, {"critical", r.Criticals}, {"warning", r.Warnings}, {"ok", r.OK}} {
			for _, item := range l.items {
				fmt.Fprintf(w, "  %s: %s\n", l.label, item)
			}
		}
		for _, p := range r.PerfData {
			fmt.Fprintf(w, "  %s: %s%s\n", p.Name, formatFloat(p.Value), p.Unit)
		}
	default:
		fmt.Fprintln(w, nagiosLine(r))
	}
}

// nagiosLine is r as a Nagios plugin's output line.
func nagiosLine(r *checkResult) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s KVELECT %s", r.Status, r.Name)
	for _, l := range []struct {
		label string
		items []string
	}{{"Unknown", r.Unknowns}, {"Crit", r.Criticals}, {"Warn", r.Warnings}, {"OK", r.OK}} {
		if len(l.items) > 0 {
			fmt.Fprintf(&b, " %s:%s", l.label, strings.Join(l.items, "; "))
		}
	}
	if len(r.PerfData) > 0 {
		b.WriteString(" |")
		for _, p := range r.PerfData {
			fmt.Fprintf(&b, " '%s'=%s%s;%s;%s", p.Name, formatFloat(p.Value), p.Unit, threshold(p.Warning), threshold(p.Critical))
		}
	}
	return strings.ReplaceAll(b.String(), "\n", " ")
}

func threshold(v float64) string {
	if v == 0 {
		return ""
	}
	return formatFloat(v)
}

func formatFloat(v float64) string { return strings.TrimSuffix(fmt.Sprintf("%.4f", v), ".0000") }

// printCheckPrometheus prints r in the Prometheus text format: the status
// code, and a gauge per performance datum, labelled with the bucket (and the
// key, for a key's datum).
func printCheckPrometheus(w io.Writer, r *checkResult, ns string) {
	fmt.Fprintf(w, "# HELP %s_status_code the check's status: 0 OK, 1 WARNING, 2 CRITICAL, 3 UNKNOWN\n# TYPE %s_status_code gauge\n", ns, ns)
	fmt.Fprintf(w, "%s_status_code{bucket=%q} %d\n", ns, r.Name, r.Code)
	seen := map[string]bool{}
	for _, p := range r.PerfData {
		name, key, _ := strings.Cut(p.Name, ":")
		metric := ns + "_" + name
		if p.Unit == "s" {
			metric += "_seconds"
		}
		if !seen[metric] {
			seen[metric] = true
			fmt.Fprintf(w, "# HELP %s %s\n# TYPE %s gauge\n", metric, p.help, metric)
		}
		labels := fmt.Sprintf("bucket=%q", r.Name)
		if key != "" {
			labels += fmt.Sprintf(",key=%q", key)
		}
		fmt.Fprintf(w, "%s{%s} %s\n", metric, labels, formatFloat(p.Value))
	}
}

// multiFlag is a repeatable string flag.
type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, ",") }
func (m *multiFlag) Set(v string) error { *m = append(*m, v); return nil }

// noLeader says that key has no leader, and, when it has no live
// candidate either, that it may be the wrong key, naming the keys that do
// have candidates.
func noLeader(ctx context.Context, b *election.Bucket, key string) string {
	candidates, err := b.Candidates(ctx, key)
	if err != nil || len(candidates) > 0 {
		return key + " has no leader"
	}
	all, err := b.AllCandidates(ctx)
	if err != nil {
		return key + " has no leader and no candidate"
	}
	keys := slices.Sorted(maps.Keys(all))
	if len(keys) == 0 {
		return key + " has no leader and no candidate: is an election running on this bucket?"
	}
	return fmt.Sprintf("%s has no leader and no candidate: is the key right? keys with candidates: %s", key, strings.Join(keys, ", "))
}
