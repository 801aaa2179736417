package cli

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"time"

	"github.com/kvelect/election"
	"github.com/kvelect/election/history"
	"github.com/kvelect/election/sidecar"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/sirupsen/logrus"
)

// candidateFlags are the flags of the commands that campaign for a key:
// run and sidecar. Each command adds its own beside them.
type candidateFlags struct {
	conn      connFlags
	key       string
	bucket    string
	name      string
	logLevel  string
	logFormat string
	metrics   string // the address to serve metrics and health on, or ""
	tolerance time.Duration
	history   bool          // record wins and stand-downs in the bucket's history
	priority  int           // election.WithPriority
	prefer    bool          // election.WithPreferHigher
	readyFor  time.Duration // with prefer: how long a higher candidate must be listed
	// leaderFile is the file that exists only while this process leads,
	// or "".
	leaderFile string
	health     healthFlags // the app's health check that gates leadership
}

// add defines the flags; name is the default of --name.
func (c *candidateFlags) add(fs *flagSet, name string) {
	c.conn.add(fs)
	fs.StringVar(&c.key, "key", "", "the election `KEY` to campaign for (required): letters, digits and - / _ = .")
	fs.bucketVar(&c.bucket, "the election bucket's `NAME`")
	fs.StringVar(&c.name, "name", name, "this candidate's `NAME`, written to the key while it leads: one of its own among the key's candidates")
	fs.StringVar(&c.logLevel, "log-level", "info", "log `LEVEL`: debug, info, warn or error")
	fs.StringVar(&c.logFormat, "log-format", "text", "log `FORMAT`: text, or json for one object per line")
	fs.StringVar(&c.metrics, "metrics", "", "serve /metrics and /healthz over HTTP on `ADDR`, HOST:PORT")
	fs.DurationVar(&c.tolerance, "health-tolerance", time.Second, "`DURATION` past its renewal deadline a leader may be before /healthz fails")
	fs.BoolVar(&c.history, "history", true, "record each win and stand-down in the bucket's leadership history, when it has one (election bucket create makes it); --history=false does not")
	fs.IntVar(&c.priority, "priority", election.DefaultPriority, "this candidate's `N`: a free key goes to the highest live priority first; 0 never leads")
	fs.BoolVar(&c.prefer, "prefer-higher", false, "hand the key to a live candidate of higher priority once it is ready (see --ready-for)")
	fs.DurationVar(&c.readyFor, "ready-for", 0, "with --prefer-higher, how long a higher candidate must be listed before it gets the key (`DURATION`; 0: two TTLs)")
	fs.StringVar(&c.leaderFile, "leader-file", "", "a `FILE` that exists, holding the fencing token, only while this process leads")
	c.health.add(fs)
}

// check validates the flags before anything connects, and returns the
// logger they configure.
func (c *candidateFlags) check() (*logrus.Logger, error) {
	if c.key == "" {
		return nil, errors.New("--key is required: the key to campaign for")
	}
	if err := election.CheckCandidate(c.name, c.key); err != nil {
		return nil, err
	}
	if err := checkMetricsAddr(c.metrics); err != nil {
		return nil, err
	}
	if c.tolerance < 0 {
		return nil, fmt.Errorf("--health-tolerance %v: want a duration of 0 or more", c.tolerance)
	}
	if c.priority < 0 {
		return nil, fmt.Errorf("--priority %d: want 0 (never leads) or more", c.priority)
	}
	if c.readyFor < 0 {
		return nil, fmt.Errorf("--ready-for %v: want a duration of 0 (two TTLs) or more", c.readyFor)
	}
	if err := c.health.check(); err != nil {
		return nil, err
	}
	if c.readyFor > 0 && !c.prefer {
		return nil, errors.New("--ready-for is for --prefer-higher")
	}
	if c.leaderFile != "" {
		if err := sidecar.CheckLeaderFile(c.leaderFile); err != nil {
			return nil, fmt.Errorf("--leader-file %q: %w", c.leaderFile, err)
		}
	}
	if err := c.conn.check(); err != nil {
		return nil, err
	}
	log := logrus.New()
	if c.logFormat == "" {
		return nil, fmt.Errorf("--log-format %q: want text or json", c.logFormat)
	}
	if err := setupLog(log, c.logFormat, c.logLevel, "--log-format ", "--log-level "); err != nil {
		return nil, err
	}
	return log, nil
}

// openBucket opens the bucket, logs what CheckBucket warns of, and unless
// --history=false opens its history: nil if there is none or it cannot be
// opened, which openHistory logs and which leaves the election as it is.
// Call c.conn.quietHistory before connecting.
func (c *candidateFlags) openBucket(ctx context.Context, js jetstream.JetStream, log *logrus.Entry) (jetstream.KeyValue, *history.History, error) {
	kv, err := openBucket(ctx, js, c.bucket)
	if err != nil {
		return nil, nil, err
	}
	warnings, err := election.CheckBucket(ctx, kv)
	if err != nil {
		return nil, nil, err
	}
	for _, w := range warnings {
		log.Warn("bucket: " + w)
	}
	var record *history.History
	if c.history {
		record = c.conn.openHistory(ctx, js, c.bucket, log)
	}
	return kv, record, nil
}

// options are the election options the flags ask for: the priority, the
// preference for higher ones, the health check, the history (nil: none)
// and the metrics (nil: none).
func (c *candidateFlags) options(record *history.History, metrics *metricsServer) []election.Option {
	opts := append([]election.Option{election.WithPriority(c.priority)}, c.health.options()...)
	if record != nil {
		opts = append(opts, election.WithEventHook(record.Record))
	}
	if c.prefer {
		opts = append(opts, election.WithPreferHigher(c.readyFor))
	}
	if metrics != nil {
		opts = append(opts, election.WithEventHook(metrics.collector.Record))
	}
	return opts
}

// openLeaderFile returns the --leader-file, with any file an earlier
// process left there removed; nil without the flag.
func (c *candidateFlags) openLeaderFile(log *logrus.Entry) (*sidecar.LeaderFile, error) {
	if c.leaderFile == "" {
		return nil, nil
	}
	f, err := sidecar.OpenLeaderFile(c.leaderFile, slogOf(log))
	if err != nil {
		return nil, fmt.Errorf("--leader-file: %w", err)
	}
	return f, nil
}

// clusterKey is the key of a candidate's metadata (election.WithMetadata)
// that names the NATS cluster its connection was on when it started
// (nats.Conn.ConnectedClusterName), and the label of an agent's node that
// does: election status shows them beside the bucket's cluster, because a
// candidate outside that cluster can lead only while the bucket's cluster
// is reachable from its own. run, sidecar and the demo publish it; agent
// labels its node with it. A lone server has no cluster: nothing is
// published.
const clusterKey = "cluster"

// connectionOptions are the options that describe nc in the candidate
// record: the connection itself (its name, client id and server), which a
// second candidate refused for taking a live one's name is told, and the
// cluster it is on (clusterMetadata).
func connectionOptions(nc *nats.Conn) []election.Option {
	return append([]election.Option{election.WithConnection(nc)}, clusterMetadata(nc)...)
}

// clusterMetadata is the option that publishes the cluster nc is connected
// to under clusterKey; none on a lone server.
func clusterMetadata(nc *nats.Conn) []election.Option {
	name := nc.ConnectedClusterName()
	if name == "" {
		return nil
	}
	return []election.Option{election.WithMetadata(map[string]string{clusterKey: name})}
}

// withClusterLabel returns labels with the cluster nc is connected to
// under clusterKey, unless labels already has one or there is no cluster;
// labels itself is not changed.
func withClusterLabel(labels map[string]string, nc *nats.Conn) map[string]string {
	name := nc.ConnectedClusterName()
	if _, set := labels[clusterKey]; set || name == "" {
		return labels
	}
	out := maps.Clone(labels)
	if out == nil {
		out = map[string]string{}
	}
	out[clusterKey] = name
	return out
}
