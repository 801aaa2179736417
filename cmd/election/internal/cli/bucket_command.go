package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/kvelect/election"
	"github.com/kvelect/election/history"
	"github.com/nats-io/nats.go/jetstream"
)

// bucketContext is the context of a bucket subcommand: done after
// bucketTimeout, or on SIGINT or SIGTERM.
func bucketContext() (context.Context, context.CancelFunc) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	ctx, cancel := context.WithTimeout(ctx, bucketTimeout)
	return ctx, func() { cancel(); stop() }
}

const bucketAbout = `Usage:
  election bucket create [--bucket B] [--ttl 10s] [--replicas 1] [--storage file|memory] [--history 7d|0]
                         [--cluster C] [--tags T1,T2]
  election bucket check [--bucket B] [--system-context NAME | --system-creds FILE]

create makes an election bucket with the given settings. If the bucket
exists it is left as it is (a TTL must not change under running elections)
and checked instead. It also makes the stream that keeps the bucket's
leadership history (KVELECT_HISTORY_B) for --history (default 7d), or
leaves an existing one as it is; --history 0 makes none. election run,
sidecar and agent record in it whenever the bucket has one; election
history reads it. Without the permission to make the history (and without
--history given), create warns and makes the bucket alone.

In a supercluster a bucket lives in one cluster, its home region: the one
--cluster names, or else the cluster of the server create connects to.
--tags places it on servers with all of those server tags. Its history
goes where it is. Candidates connected
to other clusters (or reaching it through a leaf node's --js-domain) lead
only while the home cluster is reachable; create and check print where the
bucket lives in "location:" lines: its cluster, stream leader and
replicas, the JetStream domain, and that condition.

check says whether elections can run on an existing bucket. It prints the
bucket's settings, a "warning:" line for each setting that is safe but costs
something (per-message TTLs make failover after a crash a TTL slower; an even
number of replicas; memory storage), and a "problem:" line for each that
makes the bucket unusable (no TTL, a TTL outside 2s..1h, a stream that evicts
keys at a size limit, a sealed or mirror stream). Its "durability:" lines say
what a client can verify (storage, replicas, placement, followers current)
and what only the system account can: whether the servers fsync each write.
Its "clocks:" lines give each server's clock less this host's, read by
pinging every server ($SYS.REQ.SERVER.PING.CONNZ, which any account may
ask unless its permissions forbid it; or, with --system-context or
--system-creds naming a system-account user, $SYS.REQ.SERVER.PING.VARZ),
and whether the bucket's servers agree within the 100ms the election
assumes (a warning if not); when neither can ping, they say so and how.

Memory storage expires keys within about 10 ms of the TTL and file storage
about 250 ms after it; both are safe.

Exit status: 0 usable (warnings or not), 1 unusable or unreachable, 2 bad
flags.
`

// bucketCommand defines "election bucket", which has no flags, and returns
// it with the function that runs it without an action: its actions, create
// and check, are commands of their own.
func bucketCommand() (*flagSet, runFunc) {
	fs := newFlagSet("election bucket", bucketAbout)
	return fs, func(args []string, stdout, stderr io.Writer) int {
		if len(args) == 0 || strings.HasPrefix(args[0], "-") {
			if code, ok := fs.parse(args, stdout, stderr); !ok {
				return code
			}
			return fs.usageError(stderr, "want create or check")
		}
		return fs.usageError(stderr, "unknown action %q; want create or check", args[0])
	}
}

// bucketCreateCommand defines the flags of "election bucket create" and
// returns them with the function that runs it.
func bucketCreateCommand() (*flagSet, runFunc) {
	fs := newFlagSet("election bucket create", bucketAbout)
	var conn connFlags
	conn.add(fs)
	cfg := election.BucketConfig{}
	var storage string
	fs.bucketVar(&cfg.Name, "the bucket's `NAME`: letters, digits, - and _")
	fs.DurationVar(&cfg.TTL, "ttl", 10*time.Second,
		fmt.Sprintf("`DURATION` a key lives after its last write, the longest a crashed leader blocks its election: %v to %v", election.MinTTL, election.MaxTTL))
	fs.IntVar(&cfg.Replicas, "replicas", 1, "`N` servers store the bucket: 1, 3 or 5")
	fs.StringVar(&storage, "storage", "file", "`TYPE` of storage: file or memory")
	retention := history.DefaultRetention
	fs.Var(retentionFlag{&retention}, "history", "also keep a leadership history for `DURATION`, such as 7d or 36h (see election history); 0 keeps none")
	var place placementFlags
	place.add(fs)
	return fs, func(args []string, stdout, stderr io.Writer) int {
		if code, ok := fs.parse(args, stdout, stderr); !ok {
			return code
		}
		if fs.NArg() > 0 {
			return fs.usageError(stderr, "unexpected argument %q", fs.Arg(0))
		}
		switch storage {
		case "file":
			cfg.Storage = jetstream.FileStorage
		case "memory":
			cfg.Storage = jetstream.MemoryStorage
		default:
			return fs.usageError(stderr, "--storage %q: want file or memory", storage)
		}
		if cfg.Replicas == 0 {
			return fs.usageError(stderr, "--replicas 0: want 1, 3 or 5")
		}
		if err := cfg.Validate(); err != nil {
			return fs.usageError(stderr, "%v", err)
		}
		placement, err := place.placement(given(fs.FlagSet))
		if err != nil {
			return fs.usageError(stderr, "%v", err)
		}

		ctx, cancel := bucketContext()
		defer cancel()
		ctx, stopWatching := conn.watchDenials(ctx, roleAdmin)
		defer stopWatching()
		historyGiven := given(fs.FlagSet)["history"]
		if !historyGiven {
			conn.quietHistory() // the default history is not worth failing for
		}
		nc, js, err := conn.connect("election bucket")
		if err != nil {
			return fail(stderr, fs.path, deniedOr(ctx, err))
		}
		defer nc.Close()

		_, err = js.KeyValue(ctx, cfg.Name)
		existed := err == nil
		cfg.Placement = placement
		kv, err := election.CreateBucket(ctx, js, cfg)
		err = inDomain(js, err)
		var be *election.BucketError
		switch {
		case errors.As(err, &be):
			fmt.Fprintf(stdout, "bucket %s exists and is unusable for elections:\n", cfg.Name)
			printProblems(stdout, be)
			return ExitError
		case err != nil && replicasUnsupported(err):
			return fail(stderr, fs.path, fmt.Errorf("%w; on a single server use --replicas 1", err))
		case err != nil:
			return fail(stderr, fs.path, deniedOr(ctx, err))
		}
		if existed {
			if err := sameAsAsked(ctx, kv, cfg, placement, given(fs.FlagSet)); err != nil {
				return fail(stderr, fs.path, deniedOr(ctx, inDomain(js, err)))
			}
			fmt.Fprintf(stdout, "bucket %s exists; left as it is\n", cfg.Name)
		} else {
			fmt.Fprintf(stdout, "created bucket %s\n", cfg.Name)
		}
		if retention > 0 {
			historyCtx, done := conn.historyContext(ctx)
			h, err := history.Create(historyCtx, js, cfg.Name, retention)
			err = deniedOr(historyCtx, err)
			done()
			switch {
			case err != nil && historyGiven:
				return fail(stderr, fs.path, deniedOr(ctx, err))
			case err != nil:
				fmt.Fprintf(stdout, "warning: no leadership history for bucket %s: %v (--history 0 asks for none)\n", cfg.Name, err)
			default:
				fmt.Fprintf(stdout, "history of bucket %s: kept %v\n", cfg.Name, formatRetention(h.Retention()))
			}
		}
		return report(ctx, stdout, stderr, fs.path, kv, siteOf(nc, js), nil)
	}
}

// given returns the names of the flags set on the command line.
func given(fs *flag.FlagSet) map[string]bool {
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	return set
}

// sameAsAsked says how an existing bucket differs from the settings given
// as flags: bucket create leaves a bucket as it is, and a TTL, replica
// count, storage or placement asked for and not had is an error, not a
// silent default.
func sameAsAsked(ctx context.Context, kv jetstream.KeyValue, cfg election.BucketConfig, placement *jetstream.Placement, flags map[string]bool) error {
	status, err := kv.Status(ctx)
	if err != nil {
		return fmt.Errorf("reading bucket %q: %w", kv.Bucket(), err)
	}
	var differ []string
	if flags["ttl"] && status.TTL() != cfg.TTL {
		differ = append(differ, fmt.Sprintf("TTL %v, not --ttl %v", status.TTL(), cfg.TTL))
	}
	if bs, ok := status.(*jetstream.KeyValueBucketStatus); ok && bs.StreamInfo() != nil {
		sc := bs.StreamInfo().Config
		if flags["replicas"] && sc.Replicas != cfg.Replicas {
			differ = append(differ, fmt.Sprintf("replicas %d, not --replicas %d", sc.Replicas, cfg.Replicas))
		}
		if flags["storage"] && sc.Storage != cfg.Storage {
			differ = append(differ, fmt.Sprintf("%s storage, not --storage %s", strings.ToLower(sc.Storage.String()), strings.ToLower(cfg.Storage.String())))
		}
		differ = append(differ, placementDiffers(bs.StreamInfo(), placement, flags)...)
	}
	if len(differ) == 0 {
		return nil
	}
	return fmt.Errorf("bucket %q exists with %s; it is left as it is, since running elections depend on it: use another bucket, or leave those flags out", kv.Bucket(), strings.Join(differ, ", "))
}

// bucketCheckCommand defines the flags of "election bucket check" and
// returns them with the function that runs it.
func bucketCheckCommand() (*flagSet, runFunc) {
	fs := newFlagSet("election bucket check", bucketAbout)
	var conn connFlags
	conn.add(fs)
	var name string
	fs.bucketVar(&name, "the bucket's `NAME`")
	var sys systemFlags
	sys.add(fs)
	return fs, func(args []string, stdout, stderr io.Writer) int {
		if code, ok := fs.parse(args, stdout, stderr); !ok {
			return code
		}
		if fs.NArg() > 0 {
			return fs.usageError(stderr, "unexpected argument %q", fs.Arg(0))
		}
		if err := sys.check(); err != nil {
			return fs.usageError(stderr, "%v", err)
		}

		ctx, cancel := bucketContext()
		defer cancel()
		ctx, stopWatching := conn.watchDenials(ctx, roleAdmin)
		defer stopWatching()
		nc, js, err := conn.connect("election bucket")
		if err != nil {
			return fail(stderr, fs.path, deniedOr(ctx, err))
		}
		defer nc.Close()
		kv, err := openBucket(ctx, js, name)
		if err != nil {
			return fail(stderr, fs.path, deniedOr(ctx, err))
		}
		clocks := func(info *jetstream.StreamInfo) ([]string, []string) {
			leader, servers := streamServers(info)
			return clockLines(readServerClocks(ctx, &conn, sys, servers), leader, servers)
		}
		return report(ctx, stdout, stderr, fs.path, kv, siteOf(nc, js), clocks)
	}
}

// report prints the bucket's settings and where it lives as seen from,
// then, with check (bucket check), what can and cannot be known of its
// durability and the lines and warnings check returns of the servers'
// clocks, then its warnings and problems, and returns the exit code: 1 if
// the bucket is unusable.
func report(ctx context.Context, stdout, stderr io.Writer, path string, kv jetstream.KeyValue, from site,
	check func(*jetstream.StreamInfo) (lines, warnings []string)) int {
	status, err := kv.Status(ctx)
	if err != nil {
		return fail(stderr, path, deniedOr(ctx, withDomain(from, fmt.Errorf("reading bucket %q: %w", kv.Bucket(), err))))
	}
	fmt.Fprintf(stdout, "bucket %s: %s\n", kv.Bucket(), describe(status))
	if bs, ok := status.(*jetstream.KeyValueBucketStatus); ok && bs.StreamInfo() != nil {
		for _, line := range location(bs.StreamInfo(), from) {
			fmt.Fprintln(stdout, line)
		}
	}
	var clockWarnings []string
	if check != nil {
		for _, line := range durability(status) {
			fmt.Fprintln(stdout, line)
		}
		var info *jetstream.StreamInfo
		if bs, ok := status.(*jetstream.KeyValueBucketStatus); ok {
			info = bs.StreamInfo()
		}
		var lines []string
		lines, clockWarnings = check(info)
		for _, line := range lines {
			fmt.Fprintln(stdout, line)
		}
	}
	warnings, err := election.CheckBucket(ctx, kv)
	warnings = append(warnings, clockWarnings...)
	for _, w := range warnings {
		fmt.Fprintf(stdout, "warning: %s\n", w)
	}
	var be *election.BucketError
	switch {
	case errors.As(err, &be):
		printProblems(stdout, be)
		fmt.Fprintln(stdout, "unusable for elections")
		return ExitError
	case err != nil:
		return fail(stderr, path, deniedOr(ctx, withDomain(from, err)))
	}
	fmt.Fprintln(stdout, "usable for elections")
	return ExitOK
}

func printProblems(w io.Writer, be *election.BucketError) {
	for _, p := range be.Problems {
		fmt.Fprintf(w, "problem: %s\n", p)
	}
}

// describe sums up a bucket's settings on one line.
func describe(status jetstream.KeyValueStatus) string {
	ttl := "no TTL"
	if status.TTL() > 0 {
		ttl = "TTL " + status.TTL().String()
	}
	s := fmt.Sprintf("%s, history %d", ttl, status.History())
	if bs, ok := status.(*jetstream.KeyValueBucketStatus); ok && bs.StreamInfo() != nil {
		sc := bs.StreamInfo().Config
		s += fmt.Sprintf(", replicas %d, %s storage", sc.Replicas, strings.ToLower(sc.Storage.String()))
	}
	return s
}

// durability says what a client can verify of the bucket's durability
// (storage, replicas, placement, replicas current) and what it cannot: the
// servers' fsync setting, which only the system account can read.
func durability(status jetstream.KeyValueStatus) []string {
	var lines []string
	if bs, ok := status.(*jetstream.KeyValueBucketStatus); ok && bs.StreamInfo() != nil {
		info := bs.StreamInfo()
		sc := info.Config
		line := fmt.Sprintf("durability: %s storage, %d replica", strings.ToLower(sc.Storage.String()), sc.Replicas)
		if sc.Replicas != 1 {
			line += "s"
		}
		lines = append(lines, line) // where the replicas are, and how they keep up, is location's
		if sc.Replicas == 1 {
			lines = append(lines, "durability: one replica: elections stop while its server is down, and its disk holds the only copy; use 3 replicas on a cluster")
		}
	}
	return append(lines,
		"durability, not checked: whether every server fsyncs each write before acknowledging it; with the default "+
			"(sync_interval 2m) a crashed machine can lose acknowledged writes, and an election then have two leaders",
		`durability: set jetstream { sync_interval: always } on every server, and check it with the system account: `+
			`"nats server request variables" shows "sync_always": true in each server's jetstream config`)
}

// retentionFlag is --history: a duration, with d for days as in 7d, or 0
// for none.
type retentionFlag struct{ d *time.Duration }

func (r retentionFlag) String() string {
	if r.d == nil {
		return "0"
	}
	return formatRetention(*r.d)
}

func (r retentionFlag) Set(value string) error {
	if value == "0" {
		*r.d = 0
		return nil
	}
	d, err := parseRetention(value)
	if err != nil {
		return err
	}
	*r.d = d
	return nil
}

// parseRetention reads a retention such as 7d, 36h or 90m: a minute or more.
func parseRetention(value string) (time.Duration, error) {
	var d time.Duration
	var err error
	if days, ok := strings.CutSuffix(value, "d"); ok {
		var n int
		n, err = strconv.Atoi(days)
		d = time.Duration(n) * 24 * time.Hour
	} else {
		d, err = time.ParseDuration(value)
	}
	if err != nil || d < time.Minute {
		return 0, fmt.Errorf("want a duration of a minute or more, such as 7d, 36h or 90m")
	}
	return d, nil
}

// jsErrReplicasNotSupported is the server's error code for a stream of more
// than one replica asked of a server that is not in a cluster.
const jsErrReplicasNotSupported jetstream.ErrorCode = 10074

// replicasUnsupported reports whether err is the server's refusal of more
// than one replica because it runs alone.
func replicasUnsupported(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && apiErr.ErrorCode == jsErrReplicasNotSupported
}
