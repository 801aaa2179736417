package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	iofs "io/fs"
	"os"
	"os/exec"
	"os/signal"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/kvelect/election"
	"github.com/kvelect/election/internal/slogrus"
	"github.com/sirupsen/logrus"
)

const runAbout = `Usage:
  election run --key K [--bucket B] [--name N] [--grace 10s] [--metrics ADDR]
               [--leader-file FILE] [--priority N [--prefer-higher [--ready-for D]]]
               [--serve SUBJECT --forward URL [--service-name NAME]]
               -- COMMAND [ARGS...]
  election run --once --key K [--wait DURATION] [--bucket B] [--name N] -- COMMAND [ARGS...]

Campaigns for the key K in the bucket B and runs COMMAND only while this
process leads. Run one on every machine that may do the work: one at a time
runs COMMAND. The bucket must exist (election bucket create).

- On winning, it starts COMMAND in a process group of its own, with its
  stdout and stderr, stdin from /dev/null, and in its environment:
    KVELECT_TOKEN   the fencing token: the revision of the winning claim.
                    Later leaders have larger tokens; have the resources
                    COMMAND changes refuse tokens lower than one they saw.
    KVELECT_LEADER  this candidate's name (--name)
    KVELECT_KEY     the key
    KVELECT_BUCKET  the bucket
- When leadership ends (a renewal failed until its deadline, or the key was
  deleted or taken), it sends SIGTERM to COMMAND's process group, SIGKILL
  after the grace period or at the leadership's work deadline, whichever
  comes first, and campaigns on: COMMAND starts again, with a new token,
  when this process wins again.
- When COMMAND exits by itself, it releases the key, so that another
  candidate takes over at once, and exits with COMMAND's status (128+N if
  signal N killed it).
- SIGINT or SIGTERM is passed to COMMAND's process group; once COMMAND has
  exited (SIGKILL after the grace period, or at once on a second signal), it
  releases the key and exits with COMMAND's status, or 0 if COMMAND was not
  running.
- Nothing COMMAND starts outlives it or this process's leadership: a guard
  process between the two (this binary, shown as kvelect-guard) kills
  COMMAND and everything it started, whether or not COMMAND execs, when
  COMMAND exits, when this process dies however it dies (the key then
  expires after the bucket's TTL), and at the leadership's work deadline
  if this process is paused: always before the key can age out. If the
  guard is stopped instead, this process kills COMMAND's tree itself, at
  the end of the grace period or the work deadline, whichever comes
  first. On Linux that includes what left the process group (setsid, a
  double fork); on other systems, the process group only.
- Ctrl-Z in a terminal stops this process alone: the guard kills COMMAND
  at the work deadline, and another candidate leads once the key ages
  out. Continued (fg, bg), this process campaigns on.

Every candidate of a key needs a --name of its own: a run (without --once)
started under the name of a live candidate of the key exits 1 at once
(within two thirds of the TTL) with one line naming both processes, and
leaves the live one alone. One restarted under the same name after a crash waits for the old
process's record to age out (at most a TTL and a third), then campaigns.

With --priority N, a free key goes to the live candidate of the highest
priority: lower ones wait a tenth of the TTL (at most 1s) per higher
priority listed before they claim, and claim anyway if no higher one did.
Priority 0 never leads. With --prefer-higher, a leader hands the key to a
live candidate of higher priority once it has seen it listed for
--ready-for (default two TTLs), at most once per five times that.

With --metrics ADDR (HOST:PORT), it serves over HTTP on ADDR while it runs:
  /metrics  the election's Prometheus metrics (kvelect_election_is_leader
            and the rest; see the promelection package)
  /healthz  200 "ok", or 503 with the reason if this process still counts
            itself leader more than --health-tolerance after its renewal
            deadline: its election is stuck; restart it

With --leader-file FILE, FILE exists only while this process leads: it is
written with the fencing token (a temporary file renamed over FILE) when
leadership begins, before COMMAND starts, and removed when leadership ends,
before the key is released. A FILE left by a process killed while it led
is removed at start.

Each win and stand-down is recorded in the bucket's leadership history when
the bucket has one (election bucket create makes it; election history
prints it); --history=false records nothing. Without the permission to
write it, one warning, and the election runs the same.

With --serve SUBJECT --forward URL, COMMAND is a leader-only NATS service:
while this process leads and COMMAND runs, SUBJECT is served as a NATS
micro service (--service-name, by default the key with each character
other than letters, digits, - and _ made _) in the queue group kvelect,
and each request's data is POSTed to URL, COMMAND's HTTP address (or sent
with the method in the request's Http-Method header), with the request's
headers and the fencing token in Fencing-Token. The response's body is the
reply; a status other than 2xx is a micro error reply naming it, and a
COMMAND not listening yet (starting up) an error reply 502. Every reply
carries Fencing-Token. When leadership ends or COMMAND exits, the service
stops before the key is released: no reply is sent after that (the
requester times out and retries), and requests get "no responders" until
the next leader serves. SUBJECT has no wildcards, white space or empty
tokens; URL is http or https. Not with --once.

A COMMAND paused with its whole machine may act once more on resuming:
pass KVELECT_TOKEN to what it changes.

With --once (for a job that cron or a systemd timer fires on every host),
it makes one attempt: if the key is free, or becomes free within --wait
(default 0: only if free now), and this process wins it, it runs COMMAND
once and exits with its status. If COMMAND succeeds (exits 0), the key is
marked done for the bucket's TTL, so that a host whose schedule fires a
little later skips the job. If it fails (another status, a signal), or
election run is told to stop while it runs, the key is released at once,
unmarked: a host waiting with --wait, or the next to fire, runs the job
again. --no-retry marks the job done whatever happened, for a job that must
not run twice. If another host leads the key, or ran the job and its mark
stands, it exits 75 without running COMMAND. If leadership ends while
COMMAND runs, COMMAND is stopped as above and the key is left unmarked.

On a bucket with a leadership history, each run is recorded there (its
host, start, duration, exit status and token: election history), and
checked there first for a done mark. --done-for DURATION (such as 90m, 25h
or 1d) makes a successful run's mark last that long, whatever the bucket's
TTL: a host that fires within it exits 75, whether or not it has
--done-for itself. It needs the history (election bucket create --history
makes one, and adds one to an existing bucket); election check --key K
--ran-within D alerts when the job did not run.

Exit status: COMMAND's; 1 if the server, the bucket or the election failed;
2 for bad flags; 75 with --once when another host leads or ran the job (for
systemd: SuccessExitStatus=75); 126 if COMMAND could not be started; 127 if
it was not found.
`

// Exit codes for a COMMAND that could not run, as shells and env use them.
const (
	exitCannotRun = 126
	exitNotFound  = 127
	// ExitSkipped is run --once's status when it did not run the job:
	// another host leads the key, or a done mark of an earlier run stands
	// (the key's own, for a TTL; with --done-for, the one the history
	// keeps): EX_TEMPFAIL of sysexits.h.
	ExitSkipped = 75
)

// runConfig is what the flags of run say.
type runConfig struct {
	candidateFlags
	serveFlags
	grace time.Duration
	once  bool          // run COMMAND at most once, if this process wins within wait
	wait  time.Duration // with once: how long to wait for the key to be free
	// With once: how long the done mark lasts (0: a TTL, on the key), and
	// whether a failed run marks it too (run_once.go).
	doneFor time.Duration
	noRetry bool
	argv    []string
}

// runCommand defines the flags of "election run" and returns them with the
// function that runs it.
func runCommand() (*flagSet, runFunc) {
	fs := newFlagSet("election run", runAbout)
	var cfg runConfig
	host, _ := os.Hostname()
	cfg.candidateFlags.add(fs, fmt.Sprintf("%s-%d", host, os.Getpid()))
	cfg.serveFlags.add(fs)
	fs.DurationVar(&cfg.grace, "grace", 10*time.Second, "`DURATION` COMMAND may take to exit after SIGTERM before it gets SIGKILL")
	fs.BoolVar(&cfg.once, "once", false, "make one attempt: run COMMAND once if this process wins, else exit 75")
	fs.DurationVar(&cfg.wait, "wait", 0, "with --once, how long to wait for the key to be free (`DURATION`; 0: only if free now)")
	fs.Var(spanFlag{&cfg.doneFor}, "done-for", "with --once, how long a successful run's done mark lasts (`DURATION`, such as 90m, 25h or 1d; default one TTL), kept in the bucket's history")
	fs.BoolVar(&cfg.noRetry, "no-retry", false, "with --once, mark the job done even if it failed, for a job that must not run twice")
	return fs, func(args []string, stdout, stderr io.Writer) int {
		if code, ok := fs.parse(args, stdout, stderr); !ok {
			return code
		}
		cfg.argv = fs.Args()
		log, err := cfg.check()
		if err != nil {
			return fs.usageError(stderr, "%v", err)
		}
		log.SetOutput(stderr)
		path, err := exec.LookPath(cfg.argv[0])
		if err != nil {
			fmt.Fprintf(stderr, "%s: %v\n", fs.path, err)
			if errors.Is(err, exec.ErrNotFound) || errors.Is(err, iofs.ErrNotExist) {
				return exitNotFound
			}
			return exitCannotRun // there, but not an executable file, as the shell says
		}
		cfg.argv[0] = path

		code, err := runElection(cfg, log)
		if err != nil {
			return fail(stderr, fs.path, err)
		}
		return code
	}
}

// check validates the flags before anything connects, and returns the
// logger they configure.
func (cfg *runConfig) check() (*logrus.Logger, error) {
	log, err := cfg.candidateFlags.check()
	if err != nil {
		return nil, err
	}
	if cfg.grace < 0 {
		return nil, fmt.Errorf("--grace %v: want a duration of 0 or more", cfg.grace)
	}
	if cfg.wait < 0 {
		return nil, fmt.Errorf("--wait %v: want a duration of 0 or more", cfg.wait)
	}
	if cfg.once && cfg.priority == 0 {
		return nil, errors.New("--once with --priority 0: a candidate of priority 0 never leads, so it would never run COMMAND")
	}
	if cfg.wait > 0 && !cfg.once {
		return nil, errors.New("--wait is for --once: without it, run campaigns until it is stopped")
	}
	if err := cfg.checkOnce(); err != nil {
		return nil, err
	}
	if err := cfg.serveFlags.check(cfg.key); err != nil {
		return nil, err
	}
	if cfg.serve != "" && cfg.once {
		return nil, errors.New("--serve is not for --once: a job run once serves nothing")
	}
	if len(cfg.argv) == 0 {
		return nil, errors.New("no COMMAND given: election run --key K -- COMMAND [ARGS...]")
	}
	return log, nil
}

// runElection connects, campaigns and supervises COMMAND until COMMAND exits
// by itself or a signal ends it, and returns the exit code.
func runElection(cfg runConfig, log *logrus.Logger) (int, error) {
	signals := make(chan os.Signal, 2)
	signal.Notify(signals, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(signals)

	var metrics *metricsServer
	if cfg.metrics != "" {
		var err error
		if metrics, err = listenMetrics(cfg.metrics); err != nil {
			return 0, err
		}
		defer func() {
			if err := metrics.close(); err != nil {
				log.WithError(err).Warn("stopping the metrics server")
			}
		}()
	}

	clog := log.WithFields(logrus.Fields{"bucket": cfg.bucket, "key": cfg.key, "name": cfg.name})
	// A denied permission ends the set-up, or the election, with its cause:
	// a candidate that may not write the key or its record can never lead,
	// and a permission is not granted by waiting.
	ctx, cancel := context.WithTimeout(context.Background(), bucketTimeout)
	defer cancel()
	cfg.conn.serve = cfg.serveFlags.serve
	ctx, endSetup := cfg.conn.watchDenials(ctx, roleCandidate)
	defer endSetup()
	electionCtx, endElection := context.WithCancelCause(context.Background())
	defer endElection(nil)
	var campaigning atomic.Bool
	writes, cut := context.WithCancelCause(context.Background()) // cut: the bucket's writes end (cutOnDenial)
	defer cut(nil)
	var candidate atomic.Pointer[election.Election] // once made
	setupDenied := cfg.conn.onDenied
	cfg.conn.onDenied = func(denied error) {
		switch {
		case !campaigning.Load():
			setupDenied(denied)
		default:
			endElection(denied)
			cutUnlessLeading(cut, candidate.Load(), denied)
		}
	}
	if cfg.history {
		cfg.conn.quietHistory()
	}
	nc, js, err := cfg.conn.connect("election run "+cfg.name, logConnection(clog)...)
	if err != nil {
		return 0, err
	}
	defer nc.Close()
	kv, record, err := cfg.openBucket(ctx, js, clog)
	if err != nil {
		return 0, deniedOr(ctx, err)
	}
	kv = cutOnDenial(kv, writes)
	leaderFile, err := cfg.openLeaderFile(clog)
	if err != nil {
		return 0, err
	}
	campaigning.Store(true)

	sup := newSupervisor(cfg, clog, func() { endElection(nil) })
	sup.once = cfg.once
	sup.leaderFile = leaderFile
	if sup.endpoint, err = cfg.serveFlags.endpoint(nc, clog); err != nil {
		return 0, err
	}
	opts := []election.Option{
		election.WithLogger(slogrus.New(log)),
		election.OnLost(func(cause error) {
			clog.WithField("cause", cause.Error()).Info("leadership ended")
		}),
	}
	opts = append(opts, cfg.options(record, metrics)...)
	opts = append(opts, connectionOptions(nc)...)
	if !cfg.once { // with --once, Once runs COMMAND as its work
		opts = append(opts, election.OnWon(sup.lead))
	}
	e, err := election.NewElection(ctx, cfg.name, cfg.key, kv, opts...)
	if err != nil {
		return 0, err
	}
	candidate.Store(e)
	if metrics != nil {
		metrics.serve(e, cfg.tolerance)
		clog.WithField("address", metrics.listener.Addr().String()).Info("serving /metrics and /healthz")
	}
	watching := make(chan struct{})
	defer close(watching)
	go sup.watchSignals(signals, watching)

	if cfg.once {
		code, err := runOnce(electionCtx, e, sup, cfg, record, clog)
		return code, deniedOr(electionCtx, err)
	}
	clog.Info("campaigning")
	if err := e.Start(electionCtx); err != nil {
		return 0, err
	}
	if err := deniedOr(electionCtx, nil); err != nil {
		return 0, err
	}
	return sup.exitCode(), nil
}
