package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/kvelect/election"
	"github.com/kvelect/election/fleet"
	"github.com/kvelect/election/internal/guard"
	"github.com/kvelect/election/internal/slogrus"
	"github.com/kvelect/election/promelection"
	"github.com/sirupsen/logrus"
)

const agentAbout = `Usage:
  election agent [--bucket B] [--name N] [--capacity W] [--label K=V ...]
                 [--priority N [--prefer-higher]] [--grace 10s]
                 [--health-cmd NAME=COMMAND ... [--health-interval 5s]
                 [--health-failures 3]] [--metrics ADDR]
                 --daemon NAME=COMMAND ... [--config FILE]

Joins this machine to the fleet of the bucket B as the node N (default: the
host name; keep it stable across restarts, and one per machine: an agent
started under the name of a live node exits 1 at once naming both
processes, while one restarted after a crash waits for its old record to
age out, at most a TTL and a third) and runs its share of the
daemons: each daemon runs on exactly one live node that lists it, spread
over the nodes by capacity, and moves when its node leaves or dies. Run
one agent per machine, each listing the daemons it can run.

A daemon is a shell command, run as sh -c COMMAND in its own process group,
with KVELECT_TOKEN (the fencing token of this node's hold on the daemon:
pass it to what the daemon changes), KVELECT_DAEMON, KVELECT_NODE and
KVELECT_BUCKET in its environment. If it exits by itself it is started
again after a backoff (100 ms doubling to 30 s). To move it, the agent sends
SIGTERM to its process group, SIGKILL after its grace, and hands it to the
next node only once it has exited. If this agent is cut off from the
servers, it sends SIGTERM at its renewal deadline, 8.46 s after its last
renewal at a 10 s TTL, and SIGKILL at its work deadline, 0.72 s later (or
after the grace, if that is shorter): both before the daemon's key can age
out, 9.43 s after that renewal at the earliest, and another node start the
daemon. Nothing a daemon starts outlives
it, or this agent's hold on it: a guard process (kvelect-guard) kills the
whole tree, setsid and double forks included on Linux, if the agent dies or
is paused past that deadline; if the guard is stopped, the agent kills the
tree itself at the end of the grace or that deadline, whichever is first.

--priority N (0, the default, or more) ranks this node, say 1 on a primary
site's nodes and 0 on a standby's: each daemon starts only on the live nodes
of the highest priority among those that list it, spread over them by
capacity, and on lower ones only while none of those is live. With every
node at the same priority, placement is as without --priority. A daemon
that this node runs when a node of higher priority joins stays here until
this node leaves, unless this node has --prefer-higher: then it hands the
daemon over (SIGTERM, SIGKILL after its grace, and the higher node starts
it once it has exited), as a join moves a node's excess. Unlike election
run's, --priority 0 is not "never": a node that must not run a daemon does
not list it. Give every agent of a fleet that uses priorities a version
that knows them: an older one places daemons as if all were equal.

A daemon's health command (--health-cmd NAME=COMMAND, or health_cmd in
the file) says whether this node can run it now: its database answers from
here, its port is free. It runs as sh -c COMMAND, with the daemon's
environment but no token of a hold on it, every --health-interval (5s) whether or
not this node runs the daemon, and may take that long (then it is killed
with everything it started, and failed). The node offers the daemon only
once its check passed, and stops offering it after --health-failures (3)
failures in a row: a daemon running here is then stopped (SIGTERM, SIGKILL
after its grace) and handed to a node that offers it, about interval x
failures after its check began to fail. When the check passes again the
node offers the daemon again (it does not move back for that alone). A
daemon whose check fails on every node that lists it runs nowhere until
one passes, and the agents log so.

--config FILE lists daemons in YAML:
  daemons:
    - name: outbox-relay
      command: ./relay --batch 100
      grace: 30s            # optional; default --grace
      env: {RELAY_MODE: fast}   # optional
      health_cmd: pg_isready -h db-1   # optional; see above
      health_interval: 5s   # optional; default --health-interval
      health_failures: 3    # optional; default --health-failures

SIGINT or SIGTERM leaves the fleet: the node stops counting itself a member
at once, stops each daemon (SIGTERM, SIGKILL after its grace) and hands it
over as soon as it has exited, then the agent exits 0. A second signal
kills the daemons.

election status lists the nodes and the daemons: where each runs, its
state (assigning, running, crash-looping, revoking, stopped), token and
start. When the
bucket keeps a leadership history (election bucket create makes one), the
agent records in it each node's joins and leaves (key fleet.node.N) and
each daemon's moves (key fleet.daemon.NAME), for election history;
--history=false does not.

--metrics ADDR serves /metrics (Prometheus) and /healthz (200 while this
node is a member of the fleet) on ADDR: per daemon (labels daemon, node)
kvelect_fleet_daemon_runs_here, _starts_total (it moved here),
_restarts_total and _run_nowhere_seconds (how long it has run on no node, as
this node sees the fleet; a daemon seen once stays listed until the agent
restarts); per node kvelect_fleet_members, _node_daemons, _node_capacity,
_node_priority and _node_is_member; and kvelect_build_info.

Exit status: 0 after a signal; 1 if the server, the bucket or joining
failed (another live node has the name N); 2 for bad flags.
`

// agentConfig is what the flags of agent say.
type agentConfig struct {
	conn      connFlags
	bucket    string
	name      string
	capacity  int
	priority  int  // the node's rank in placement (fleet.Config.Priority)
	prefer    bool // hand daemons to nodes of higher priority (fleet.Config.PreferHigher)
	labels    map[string]string
	grace     time.Duration
	daemons   []agentDaemon
	file      string
	logLevel  string
	logFormat string
	history   bool   // record in the bucket's leadership history
	metrics   string // the address to serve metrics and health on, or ""
	// healthCmds are the daemons' --health-cmd, by daemon; healthInterval
	// and healthFailures the defaults of every daemon's health check.
	healthCmds     map[string]string
	healthInterval time.Duration
	healthFailures int
	healthDefaults bool // --health-interval or --health-failures was given
}

// agentCommand defines the flags of "election agent" and returns them with
// the function that runs it.
func agentCommand() (*flagSet, runFunc) {
	fs := newFlagSet("election agent", agentAbout)
	cfg := agentConfig{labels: map[string]string{}, healthCmds: map[string]string{}}
	cfg.conn.add(fs)
	host, _ := os.Hostname()
	fs.bucketVar(&cfg.bucket, "the fleet's election bucket `NAME`")
	fs.StringVar(&cfg.name, "name", host, "this node's `NAME`, stable across restarts: letters, digits, - _ = / and dots")
	fs.IntVar(&cfg.capacity, "capacity", 1, "this node's weight `W`: a node of capacity 2 runs twice the daemons of one of capacity 1")
	fs.IntVar(&cfg.priority, "priority", 0, "this node's priority `N`, 0 or more: daemons start on the live nodes of the highest priority that list them")
	fs.BoolVar(&cfg.prefer, "prefer-higher", false, "hand this node's daemons to a node of higher --priority as soon as one that lists them is live")
	fs.Var(labelFlags{cfg.labels}, "label", "a `KEY=VALUE` describing this node (zone=eu-1), shown by status; repeatable")
	fs.DurationVar(&cfg.grace, "grace", 10*time.Second, "`DURATION` a daemon may take to exit after SIGTERM before it gets SIGKILL")
	fs.Var(daemonFlags{&cfg.daemons}, "daemon", "a daemon this node can run, `NAME=COMMAND`; repeatable")
	fs.StringVar(&cfg.file, "config", "", "a YAML `FILE` listing daemons (see above)")
	fs.Var(healthCmdFlags{cfg.healthCmds}, "health-cmd", "a daemon's health command, `NAME=COMMAND`: offer the daemon NAME only while COMMAND exits 0 (see above); repeatable")
	fs.DurationVar(&cfg.healthInterval, "health-interval", defaultHealthInterval, "how often each daemon's health command runs, and how long it may take (`DURATION`, at least 10ms); health_interval in the file overrides it")
	fs.IntVar(&cfg.healthFailures, "health-failures", defaultHealthFailures, "failed health checks in a row (`N`, at least 1) that make this node stop offering a daemon; health_failures in the file overrides it")
	fs.StringVar(&cfg.logLevel, "log-level", "info", "log `LEVEL`: debug, info, warn or error")
	fs.StringVar(&cfg.logFormat, "log-format", "text", "log `FORMAT`: text, or json for one object per line")
	fs.BoolVar(&cfg.history, "history", true, "record joins, leaves and daemon moves in the bucket's leadership history, when it has one; --history=false does not")
	fs.StringVar(&cfg.metrics, "metrics", "", "serve /metrics and /healthz over HTTP on `ADDR`, HOST:PORT")
	return fs, func(args []string, stdout, stderr io.Writer) int {
		if code, ok := fs.parse(args, stdout, stderr); !ok {
			return code
		}
		if fs.NArg() > 0 {
			return fs.usageError(stderr, "unexpected argument %q: give daemons with --daemon NAME=COMMAND", fs.Arg(0))
		}
		fs.Visit(func(f *flag.Flag) {
			cfg.healthDefaults = cfg.healthDefaults || f.Name == "health-interval" || f.Name == "health-failures"
		})
		log, nodeCfg, err := cfg.check()
		if err != nil {
			return fs.usageError(stderr, "%v", err)
		}
		log.SetOutput(stderr)
		if err := runAgent(cfg, nodeCfg, log); err != nil {
			return fail(stderr, fs.path, err)
		}
		return ExitOK
	}
}

// check validates the flags and the file before anything connects, and
// returns the logger they configure and the node's fleet configuration,
// whose daemons' Run is set by runAgent.
func (cfg *agentConfig) check() (*logrus.Logger, fleet.Config, error) {
	if cfg.grace < 0 {
		return nil, fleet.Config{}, fmt.Errorf("--grace %v: want a duration of 0 or more", cfg.grace)
	}
	if cfg.capacity < 1 {
		return nil, fleet.Config{}, fmt.Errorf("--capacity %d: want 1 or more", cfg.capacity)
	}
	if cfg.priority < 0 {
		return nil, fleet.Config{}, fmt.Errorf("--priority %d: want 0 (the default: every node equal) or more, the higher preferred", cfg.priority)
	}
	if cfg.healthInterval < election.MinHealthInterval {
		return nil, fleet.Config{}, fmt.Errorf("--health-interval %v: want at least %v", cfg.healthInterval, election.MinHealthInterval)
	}
	if cfg.healthFailures < 1 {
		return nil, fleet.Config{}, fmt.Errorf("--health-failures %d: want 1 or more", cfg.healthFailures)
	}
	if err := checkMetricsAddr(cfg.metrics); err != nil {
		return nil, fleet.Config{}, err
	}
	var fromFile []agentDaemon
	if cfg.file != "" {
		var err error
		if fromFile, err = readAgentFile(cfg.file); err != nil {
			return nil, fleet.Config{}, err
		}
	}
	daemons, err := mergeDaemons(cfg.daemons, fromFile)
	if err != nil {
		return nil, fleet.Config{}, err
	}
	if err := withHealthCmds(daemons, cfg.healthCmds); err != nil {
		return nil, fleet.Config{}, err
	}
	if cfg.healthDefaults && !slices.ContainsFunc(daemons, func(d agentDaemon) bool { return d.HealthCmd != "" }) {
		return nil, fleet.Config{}, errors.New("--health-interval and --health-failures are for daemons with a health command (--health-cmd NAME=COMMAND, or health_cmd in --config)")
	}
	cfg.daemons = daemons
	nodeCfg := fleet.Config{Name: cfg.name, Capacity: cfg.capacity, Priority: cfg.priority, PreferHigher: cfg.prefer,
		Labels: cfg.labels, Version: version()}
	for _, d := range daemons {
		fd := fleet.Daemon{Name: d.Name, Run: func(context.Context) error { return nil }}
		if d.HealthCmd != "" {
			fd.Health = func(context.Context) error { return nil }
			fd.HealthInterval, fd.HealthFailures = cfg.healthOf(d)
		}
		nodeCfg.Daemons = append(nodeCfg.Daemons, fd)
	}
	if err := nodeCfg.Validate(); err != nil {
		return nil, fleet.Config{}, err
	}
	if err := cfg.conn.check(); err != nil {
		return nil, fleet.Config{}, err
	}
	log := logrus.New()
	if err := setupLog(log, cfg.logFormat, cfg.logLevel, "--log-format ", "--log-level "); err != nil {
		return nil, fleet.Config{}, err
	}
	return log, nodeCfg, nil
}

// runAgent joins the fleet and runs daemons until a signal, then leaves.
func runAgent(cfg agentConfig, nodeCfg fleet.Config, log *logrus.Logger) error {
	signals := make(chan os.Signal, 2)
	signal.Notify(signals, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(signals)

	alog := log.WithFields(logrus.Fields{"bucket": cfg.bucket, "node": cfg.name})
	var metrics *metricsServer
	if cfg.metrics != "" {
		var err error
		if metrics, err = listenRegistry(cfg.metrics); err != nil {
			return err
		}
		defer func() {
			if err := metrics.close(); err != nil {
				alog.WithError(err).Warn("stopping the metrics server")
			}
		}()
	}
	ctx, cancel := context.WithTimeout(context.Background(), bucketTimeout)
	defer cancel()
	ctx, endSetup := cfg.conn.watchDenials(ctx, roleCandidate)
	defer endSetup()
	// A denied permission ends the set-up, or, once joined, the agent: a
	// node that may not write the bucket can never run a daemon, and a
	// permission is not granted by waiting.
	// Until it joined, nothing of the node leads, so its writes end at once
	// (cutOnDenial); once joined, it leaves the fleet, handing its daemons
	// over.
	setupDenied := cfg.conn.onDenied
	var joined atomic.Bool
	denials := make(chan error, 1)
	writes, cut := context.WithCancelCause(context.Background())
	defer cut(nil)
	cfg.conn.onDenied = func(denied error) {
		if joined.Load() {
			select {
			case denials <- denied:
			default:
			}
			return
		}
		cut(denied)
		setupDenied(denied)
	}
	if cfg.history {
		cfg.conn.quietHistory()
	}
	nc, js, err := cfg.conn.connect("election agent "+cfg.name, logConnection(alog)...)
	if err != nil {
		return err
	}
	defer nc.Close()
	kv, err := openBucket(ctx, js, cfg.bucket)
	if err != nil {
		return deniedOr(ctx, err)
	}
	kv = cutOnDenial(kv, writes)
	// The bucket's defaults reach every election of the fleet: the node's
	// membership and each daemon's.
	defaults := []election.Option{election.WithLogger(slogrus.New(log)), election.WithConnection(nc)}
	if cfg.history {
		if record := cfg.conn.openHistory(ctx, js, cfg.bucket, alog); record != nil {
			defaults = append(defaults, election.WithEventHook(record.Record))
		}
	}
	b, err := election.OpenBucket(ctx, kv, defaults...)
	if err != nil {
		return deniedOr(ctx, err)
	}
	defer b.Close()

	var joinedNode atomic.Pointer[fleet.Node]
	var fm *promelection.FleetCollector
	if metrics != nil {
		fm = promelection.NewFleetCollector(b, nodeCfg, joinedNode.Load)
		if err := metrics.registry.Register(fm); err != nil {
			return err
		}
		watchCtx, stopWatching := context.WithCancel(context.Background())
		watched := make(chan struct{})
		defer func() {
			stopWatching()
			<-watched
		}()
		go func() {
			defer close(watched)
			fm.Watch(watchCtx, time.Second)
		}()
		metrics.serveHealth(memberHealth(joinedNode.Load))
		alog.WithField("address", metrics.listener.Addr().String()).Info("serving /metrics and /healthz")
	}

	procs := &daemonProcs{running: map[*guard.Child]bool{}, metrics: fm, start: startGuarded}
	for i, d := range cfg.daemons {
		grace := cmpOr(d.Grace, cfg.grace)
		nodeCfg.Daemons[i].Run = procs.run(d, cfg, grace, alog.WithField("daemon", d.Name))
		nodeCfg.Daemons[i].DrainTimeout = grace + drainSlack
		if d.HealthCmd != "" {
			nodeCfg.Daemons[i].Health = commandCheck(d.HealthCmd, daemonEnv(d, cfg))
		}
	}
	nodeCfg.Logger = slogrus.New(log)
	nodeCfg.Labels = withClusterLabel(nodeCfg.Labels, nc)

	// Joining waits up to a TTL and a third when the name's previous
	// process crashed: bound it by that, not by the set-up timeout.
	joinCtx, stopJoining := context.WithCancel(context.Background())
	defer stopJoining()
	stopOnDenial := context.AfterFunc(ctx, func() {
		if deniedOr(ctx, nil) != nil {
			stopJoining()
		}
	})
	defer stopOnDenial()
	go func() {
		select {
		case <-signals:
			stopJoining()
		case <-joinCtx.Done():
		}
	}()
	node, err := fleet.Join(joinCtx, b, nodeCfg)
	stopJoining()
	if err != nil {
		return deniedOr(ctx, err)
	}
	joined.Store(true)
	joinedNode.Store(node)
	endSetup() // fleet.Join logged "joined the fleet"

	var failure error // why the agent leaves, when it is not asked to
	select {
	case <-signals:
		alog.Info("leaving the fleet: stopping the daemons and handing them over")
	case failure = <-denials:
		alog.WithError(failure).Error("leaving the fleet: this node may not write the bucket, so it can never run a daemon")
	case <-node.Done(): // it left by itself: another live node took its name
		failure = node.Err()
	}
	left := make(chan struct{})
	go func() {
		node.Leave()
		close(left)
	}()
	for {
		select {
		case <-left:
			return failure
		case <-signals:
			alog.Warn("second signal: killing the daemons")
			procs.killAll()
		}
	}
}

// drainSlack is how long past a daemon's grace its Run may take to return:
// the SIGKILL and the reaping of its process group.
const drainSlack = 2 * time.Second

func cmpOr(d, fallback time.Duration) time.Duration {
	if d == 0 {
		return fallback
	}
	return d
}

// daemonProcs are the daemons' running processes.
type daemonProcs struct {
	mu      sync.Mutex
	running map[*guard.Child]bool
	metrics *promelection.FleetCollector // nil without --metrics
	// start starts a daemon's command under its guard: startGuarded, or a
	// test's stand-in for a guard that fails in ways a real one seldom
	// does on cue.
	start func(leading context.Context, argv, env []string, token uint64) (*guard.Child, error)
}

// run returns the Run function of daemon d: it runs COMMAND until it exits
// (an error, so that the fleet starts it again after a backoff) or the
// daemon's context is cancelled (then SIGTERM, and SIGKILL after grace).
// COMMAND's guard kills it at the work deadline of the node's hold on the
// daemon if that comes first: the node lost the daemon, or was paused.
func (p *daemonProcs) run(d agentDaemon, cfg agentConfig, grace time.Duration, log *logrus.Entry) func(context.Context) error {
	env := daemonEnv(d, cfg)
	return func(ctx context.Context) error {
		token, _ := election.TokenFromContext(ctx)
		if p.metrics != nil {
			p.metrics.Ran(d.Name, token)
		}
		c, err := p.start(ctx, []string{"/bin/sh", "-c", d.Command}, env, token)
		if errors.Is(err, guard.ErrLeadershipEnded) {
			if _, ok := election.WorkDeadline(ctx); ok {
				// The hold lasts, but the guard reported nothing in time
				// and is gone: an error, so that the fleet starts the
				// daemon again after its backoff.
				return err
			}
			// Paused between the win and here: the hold is over, and its
			// context ends at its validity deadline, already past. The
			// node campaigns on as placement says; not a crash.
			log.WithField("token", token).Warn("the hold on the daemon ended before the daemon could start")
			<-ctx.Done()
			return nil
		}
		if err != nil {
			return err
		}
		p.mu.Lock()
		p.running[c] = true
		p.mu.Unlock()
		defer func() {
			p.mu.Lock()
			delete(p.running, c)
			p.mu.Unlock()
		}()
		log := log.WithFields(logrus.Fields{"token": token, "pid": c.PID()})
		log.WithField("command", d.Command).Info("started the daemon")
		g := guarded{child: c, grace: grace, what: "daemon", who: "this agent", log: log}
		_, stopped := g.supervise(ctx, nil, nil, func(bool) {
			if errors.Is(context.Cause(ctx), fleet.ErrRevoked) {
				log.Info("stopping the daemon to hand it over")
			} else {
				log.WithField("cause", context.Cause(ctx).Error()).Warn("lost the daemon: stopping it")
			}
		})
		switch {
		case stopped || ctx.Err() != nil:
		case c.Expired():
			return errors.New("the daemon was killed at its work deadline: this node did not renew its hold in time")
		case c.Killed():
			return errors.New("the daemon was killed at its work deadline by this agent: its guard did not (was it stopped?)")
		default:
			return fmt.Errorf("the daemon exited by itself: %s", exitReason(c.ExitCode()))
		}
		log.WithField("status", c.ExitCode()).Info("the daemon stopped")
		return nil
	}
}

// daemonEnv is the environment of daemon d's command and of its health
// command: the agent's, KVELECT_DAEMON, KVELECT_NODE, KVELECT_BUCKET and
// the daemon's own env. The daemon's command gets KVELECT_TOKEN besides.
func daemonEnv(d agentDaemon, cfg agentConfig) []string {
	env := append(os.Environ(),
		"KVELECT_DAEMON="+d.Name,
		"KVELECT_NODE="+cfg.name,
		"KVELECT_BUCKET="+cfg.bucket,
	)
	for k, v := range d.Env {
		env = append(env, k+"="+v)
	}
	return env
}

// healthOf returns the interval and failures of daemon d's health check:
// its own, or the agent's defaults.
func (cfg *agentConfig) healthOf(d agentDaemon) (time.Duration, int) {
	failures := d.HealthFailures
	if failures == 0 {
		failures = cfg.healthFailures
	}
	return cmpOr(d.HealthInterval, cfg.healthInterval), failures
}

// exitReason says what a daemon's exit status means: sh -c COMMAND exits
// 127 when COMMAND is not found and 126 when it cannot be executed.
func exitReason(code int) string {
	switch code {
	case 127:
		return "command not found (status 127)"
	case 126:
		return "command not executable (status 126)"
	}
	return fmt.Sprintf("status %d", code)
}

// killAll kills every running daemon's process group.
func (p *daemonProcs) killAll() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.running {
		c.Kill()
	}
}
