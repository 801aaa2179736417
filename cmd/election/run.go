package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
	"time"

	"github.com/kvelect/election"
	"github.com/kvelect/election/internal/slogrus"
	"github.com/sirupsen/logrus"
)

const runAbout = `Usage:
  election run --key K [--bucket B] [--name N] [--grace 10s] -- COMMAND [ARGS...]

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
  after the grace period, and campaigns on: COMMAND starts again, with a new
  token, when this process wins again.
- When COMMAND exits by itself, it releases the key, so that another
  candidate takes over at once, and exits with COMMAND's status (128+N if
  signal N killed it).
- SIGINT or SIGTERM is passed to COMMAND's process group; once COMMAND has
  exited (SIGKILL after the grace period, or at once on a second signal), it
  releases the key and exits with COMMAND's status, or 0 if COMMAND was not
  running.
- Whatever COMMAND leaves running in its process group is killed when it
  exits. If this process is killed, the kernel kills COMMAND (Linux; only
  COMMAND itself, so exec the program from a wrapper script), and the key
  expires after the bucket's TTL.

COMMAND may run up to the grace period after leadership ended, longer on a
paused machine: pass KVELECT_TOKEN to what it changes.

Exit status: COMMAND's; 1 if the server, the bucket or the election failed;
2 for bad flags; 126 if COMMAND could not be started; 127 if it was not
found.
`

// Exit codes for a COMMAND that could not run, as shells and env use them.
const (
	exitCannotRun = 126
	exitNotFound  = 127
)

// runConfig is what the flags of run say.
type runConfig struct {
	conn      connFlags
	key       string
	bucket    string
	name      string
	grace     time.Duration
	logLevel  string
	logFormat string
	argv      []string
}

// runMain runs "election run".
func runMain(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("election run", runAbout)
	var cfg runConfig
	cfg.conn.add(fs)
	host, _ := os.Hostname()
	fs.StringVar(&cfg.key, "key", "", "the election `KEY` to campaign for (required): letters, digits and - / _ = .")
	fs.StringVar(&cfg.bucket, "bucket", defaultBucket, "the election bucket's `NAME`")
	fs.StringVar(&cfg.name, "name", fmt.Sprintf("%s-%d", host, os.Getpid()), "this candidate's `NAME`, written to the key while it leads")
	fs.DurationVar(&cfg.grace, "grace", 10*time.Second, "`DURATION` COMMAND may take to exit after SIGTERM before it gets SIGKILL")
	fs.StringVar(&cfg.logLevel, "log-level", "info", "log `LEVEL`: debug, info, warn or error")
	fs.StringVar(&cfg.logFormat, "log-format", "text", "log `FORMAT`: text, or json for one object per line")
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
		return exitNotFound
	}
	cfg.argv[0] = path

	code, err := runElection(cfg, log)
	if err != nil {
		return fail(stderr, fs.path, err)
	}
	return code
}

// check validates the flags before anything connects, and returns the
// logger they configure.
func (cfg *runConfig) check() (*logrus.Logger, error) {
	if cfg.key == "" {
		return nil, errors.New("--key is required: the key to campaign for")
	}
	// NewElection checks the name and key before it looks at the bucket.
	if _, err := election.NewElection(cfg.name, cfg.key, nil); !errors.Is(err, election.ErrNilBucket) {
		return nil, err
	}
	if cfg.grace < 0 {
		return nil, fmt.Errorf("--grace %v: want a duration of 0 or more", cfg.grace)
	}
	if len(cfg.argv) == 0 {
		return nil, errors.New("no COMMAND given: election run --key K -- COMMAND [ARGS...]")
	}
	log := logrus.New()
	switch cfg.logFormat {
	case "text":
		log.SetFormatter(&logrus.TextFormatter{FullTimestamp: true, TimestampFormat: "15:04:05.000"})
	case "json":
		log.SetFormatter(&logrus.JSONFormatter{})
	default:
		return nil, fmt.Errorf("--log-format %q: want text or json", cfg.logFormat)
	}
	level, err := logrus.ParseLevel(cfg.logLevel)
	if err != nil {
		return nil, fmt.Errorf("--log-level %q: want debug, info, warn or error", cfg.logLevel)
	}
	log.SetLevel(level)
	return log, nil
}

// runElection connects, campaigns and supervises COMMAND until COMMAND exits
// by itself or a signal ends it, and returns the exit code.
func runElection(cfg runConfig, log *logrus.Logger) (int, error) {
	signals := make(chan os.Signal, 2)
	signal.Notify(signals, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(signals)

	nc, js, err := cfg.conn.connect("election run " + cfg.name)
	if err != nil {
		return 0, err
	}
	defer nc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), bucketTimeout)
	defer cancel()
	kv, err := openBucket(ctx, js, cfg.bucket)
	if err != nil {
		return 0, err
	}
	warnings, err := election.CheckBucket(ctx, kv)
	if err != nil {
		return 0, err
	}
	clog := log.WithFields(logrus.Fields{"bucket": cfg.bucket, "key": cfg.key, "name": cfg.name})
	for _, w := range warnings {
		clog.Warn("bucket: " + w)
	}

	electionCtx, endElection := context.WithCancel(context.Background())
	defer endElection()
	sup := newSupervisor(cfg, clog, endElection)
	e, err := election.NewElection(cfg.name, cfg.key, kv,
		election.WithLogger(slogrus.New(log)),
		election.OnWon(sup.lead),
		election.OnLost(func(cause error) {
			clog.WithField("cause", cause.Error()).Info("leadership ended")
		}),
	)
	if err != nil {
		return 0, err
	}
	watching := make(chan struct{})
	defer close(watching)
	go sup.watchSignals(signals, watching)

	clog.Info("campaigning")
	if err := e.Start(electionCtx); err != nil {
		return 0, err
	}
	return sup.exitCode(), nil
}
