package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/kvelect/election"
	"github.com/kvelect/election/internal/slogrus"
	"github.com/kvelect/election/sidecar"
	"github.com/sirupsen/logrus"
)

// sidecarAbout is the help of election sidecar.
const sidecarAbout = `Usage:
  election sidecar --key K [--listen 127.0.0.1:4040] [--bucket B] [--name N]
                   [--leader-file FILE] [--metrics ADDR]
                   [--priority N [--prefer-higher [--ready-for D]]]
                   [--serve SUBJECT --forward URL [--service-name NAME]]

Campaigns for the key K in the bucket B, runs nothing, and tells another
process, in any language, about the key's leadership over HTTP on --listen
(loopback by default): a sidecar container beside an application that must
act only while its pod leads. The bucket must exist (election bucket create).

  GET /         {"name": "LEADER"}, as Kubernetes' leader-elector answered
                ("" when nobody leads)
  GET /leader   the leadership as JSON: name (the leader), token (its
                fencing token), since, renewed (its latest write), is_leader
                (whether this instance leads), self (this instance's name),
                at (when this answer was made) and lease_ms (below)
  GET /self     the same, with status 200 while this instance leads and 503
                while it does not
  GET /events   server-sent events (text/event-stream): the current state
                (checked as /self checks it), then one per change of leader
                and, while this instance leads, one with a fresh lease
                after every renewal, each the JSON of /leader
  GET /healthz  the sidecar's own health: 200 while it is connected to NATS,
                campaigning and not stuck; 503 otherwise. It says nothing
                about leadership: do not make a pod's readiness depend on
                leading, or a rolling update stalls (docs/sidecar.md)

The token is exact on the leader's own sidecar. Another sidecar gives the
revision at which it saw the leader claim the key, or null if it did not
see the claim itself (the leader led before it started, or claimed while
the sidecar was paused or its watcher lagged: it then sees only a renewal).
since is when the claim reached the server (on the leader's own sidecar,
when it began leading), or null likewise.

With --leader-file FILE, FILE exists only while this instance leads: it is
written with the fencing token (a temporary file renamed over FILE) when
leadership begins and removed when it ends, before the key is released. A
FILE left by a sidecar killed while it led is removed at start.

Each win and stand-down is recorded in the bucket's leadership history when
the bucket has one (election bucket create makes it; election history
prints it); --history=false records nothing. Without the permission to
write it, one warning, and the election runs the same.

SIGINT or SIGTERM: a leader stands down, removes the leader file and
releases the key, so that another candidate leads within milliseconds; the
sidecar exits 0. A second signal ends it at once.

While this instance leads, each answer and event carries lease_ms: how
many milliseconds the application may act as leader after it receives it,
without hearing from the sidecar again (until the sidecar's validity
deadline; the delivery and the application's polling come out of the work
margin after it). A sidecar paused or cut off sends nothing more, and the
lease runs out by itself before another candidate can lead. Act only
within the lease, and pass the token to whatever the application changes,
to have that refuse tokens lower than one it has seen.

With --serve SUBJECT --forward URL, the sidecar turns an HTTP application
into a leader-only NATS service: while this instance leads, it serves
SUBJECT as a NATS micro service (--service-name, by default the key with
each character other than letters, digits, - and _ made _; nats micro ls
lists it) in the queue group kvelect, and POSTs each request's data to URL
(or uses the method in the request's Http-Method header), with the
request's headers and the fencing token in Fencing-Token. The response's
body is the reply; a status other than 2xx is a micro error reply naming
it, and an application that cannot be reached an error reply 502. Every
reply carries Fencing-Token. When leadership ends the service stops: no
reply is sent after that (the requester times out and retries), and
requests get "no responders" until the next leader serves. SUBJECT has no
wildcards, white space or empty tokens; URL is http or https.

Exit status: 0 after SIGINT or SIGTERM; 1 if the server, the bucket or an
address failed; 2 for bad flags.
`

// defaultSidecarListen is where the sidecar serves by default: the address
// and port of Kubernetes' leader-elector, on loopback only.
const defaultSidecarListen = "127.0.0.1:4040"

// sidecarConfig is what the flags of sidecar say.
type sidecarConfig struct {
	candidateFlags
	serveFlags
	listen string
}

// sidecarCommand defines the flags of "election sidecar" and returns them
// with the function that runs it until SIGINT or SIGTERM.
func sidecarCommand() (*flagSet, runFunc) {
	fs, run := sidecarCommandContext()
	return fs, func(args []string, stdout, stderr io.Writer) int {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		defer stop()
		// After the first signal, a second one ends the process as it
		// would without the sidecar's handler.
		context.AfterFunc(ctx, stop)
		return run(ctx, args, stdout, stderr)
	}
}

// sidecarCommandContext defines the flags of "election sidecar" and returns
// them with the function that runs it until ctx is done.
func sidecarCommandContext() (*flagSet, func(ctx context.Context, args []string, stdout, stderr io.Writer) int) {
	fs := newFlagSet("election sidecar", sidecarAbout)
	var cfg sidecarConfig
	host, _ := os.Hostname()
	cfg.candidateFlags.add(fs, host)
	fs.StringVar(&cfg.listen, "listen", defaultSidecarListen, "serve the leadership over HTTP on `ADDR`, HOST:PORT")
	cfg.serveFlags.add(fs)
	return fs, func(ctx context.Context, args []string, stdout, stderr io.Writer) int {
		if code, ok := fs.parse(args, stdout, stderr); !ok {
			return code
		}
		if fs.NArg() > 0 {
			return fs.usageError(stderr, "unexpected argument %q: the sidecar runs no command (election run does)", fs.Arg(0))
		}
		log, err := cfg.check()
		if err != nil {
			return fs.usageError(stderr, "%v", err)
		}
		log.SetOutput(stderr)
		if err := runSidecar(ctx, cfg, log); err != nil {
			return fail(stderr, fs.path, err)
		}
		return ExitOK
	}
}

// check validates the flags before anything connects, and returns the
// logger they configure.
func (cfg *sidecarConfig) check() (*logrus.Logger, error) {
	log, err := cfg.candidateFlags.check()
	if err != nil {
		return nil, err
	}
	if _, _, err := net.SplitHostPort(cfg.listen); err != nil {
		return nil, fmt.Errorf("--listen %q: want HOST:PORT, such as %s", cfg.listen, defaultSidecarListen)
	}
	if err := cfg.serveFlags.check(cfg.key); err != nil {
		return nil, err
	}
	return log, nil
}

// runSidecar listens, connects, campaigns and serves the leadership until
// ctx is done; then it stands down, releases the key and stops serving.
func runSidecar(ctx context.Context, cfg sidecarConfig, log *logrus.Logger) error {
	// Listen first, so that a taken port fails before anything campaigns.
	ln, err := net.Listen("tcp", cfg.listen)
	if err != nil {
		return fmt.Errorf("--listen: %w", err)
	}
	defer ln.Close() // once served, closed by the server's Shutdown; closing again is harmless
	var metrics *metricsServer
	if cfg.metrics != "" {
		if metrics, err = listenMetrics(cfg.metrics); err != nil {
			return err
		}
		defer func() {
			if err := metrics.close(); err != nil {
				log.WithError(err).Warn("stopping the metrics server")
			}
		}()
	}

	clog := log.WithFields(logrus.Fields{"bucket": cfg.bucket, "key": cfg.key, "name": cfg.name})
	// A denied permission ends the set-up, or the election, with its cause:
	// a candidate that may not write can never lead (endOnDenial).
	setupCtx, cancel := context.WithTimeout(ctx, bucketTimeout)
	defer cancel()
	cfg.conn.serve = cfg.serveFlags.serve
	setupCtx, endSetup := cfg.conn.watchDenials(setupCtx, roleCandidate)
	defer endSetup()
	var endOnDenial atomic.Pointer[context.CancelCauseFunc]      // the election's end, once it runs
	var candidate atomic.Pointer[election.Election]              // set with endOnDenial
	writes, cut := context.WithCancelCause(context.Background()) // cut: the bucket's writes end (cutOnDenial)
	defer cut(nil)
	setupDenied := cfg.conn.onDenied
	cfg.conn.onDenied = func(denied error) {
		if end := endOnDenial.Load(); end != nil {
			(*end)(denied)
			cutUnlessLeading(cut, candidate.Load(), denied)
			return
		}
		setupDenied(denied)
	}
	if cfg.history {
		cfg.conn.quietHistory()
	}
	nc, js, err := cfg.conn.connect("election sidecar "+cfg.name, logConnection(clog)...)
	if err != nil {
		return err
	}
	defer nc.Close()
	kv, history, err := cfg.openBucket(setupCtx, js, clog)
	if err != nil {
		return deniedOr(setupCtx, err)
	}
	kv = cutOnDenial(kv, writes)
	// One watcher serves both the election and what the sidecar reports.
	b, err := election.OpenBucket(setupCtx, kv, election.WithLogger(slogrus.New(log)))
	if err != nil {
		return deniedOr(setupCtx, err)
	}
	defer b.Close()
	leaderFile, err := cfg.openLeaderFile(clog)
	if err != nil {
		return err
	}

	opts := append(cfg.options(history, metrics),
		election.OnLost(func(cause error) {
			clog.WithField("cause", cause.Error()).Info("leadership ended")
		}),
	)
	opts = append(opts, connectionOptions(nc)...)
	ep, err := cfg.serveFlags.endpoint(nc, clog)
	if err != nil {
		return err
	}
	scfg := sidecar.Config{Connected: nc.IsConnected, LeaderFile: leaderFile, HealthTolerance: cfg.tolerance, Logger: slogOf(clog)}
	if ep != nil {
		scfg.WhileLeading = func(leading context.Context) { serveWhileLeading(ep, leading, clog) }
	}
	sc, err := sidecar.New(b, cfg.name, cfg.key, scfg, opts...)
	if err != nil {
		return err
	}
	e := sc.Election()
	if metrics != nil {
		metrics.serve(e, cfg.tolerance)
		clog.WithField("address", metrics.listener.Addr().String()).Info("serving /metrics and /healthz")
	}

	watchCtx, stopWatching := context.WithCancel(context.Background())
	followed, err := sc.Follow(watchCtx)
	if err != nil {
		stopWatching()
		return err
	}
	defer func() {
		stopWatching()
		<-followed
	}()

	// Start returns once ctx is done and a leader has stood down, removed
	// its leader file and released the key; until then the server answers,
	// with 503 on /self from the moment leadership ends. A server that
	// fails ends the election too.
	electionCtx, endElection := context.WithCancelCause(ctx)
	defer endElection(nil)
	candidate.Store(e)
	endOnDenial.Store(&endElection)
	srv := &http.Server{Handler: sc.Handler(), ReadHeaderTimeout: 10 * time.Second}
	served := make(chan struct{})
	go func() {
		defer close(served)
		if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			endElection(fmt.Errorf("serving on --listen: %w", err))
		}
	}()
	clog.WithField("url", "http://"+ln.Addr().String()+"/").Info("campaigning; serving the leadership over HTTP")
	startErr := e.Start(electionCtx)

	sc.Close() // ends the event streams, which would hold Shutdown up
	shutdownCtx, cancelShutdown := context.WithTimeout(context.Background(), shutdownTimeout)
	defer cancelShutdown()
	shutdownErr := srv.Shutdown(shutdownCtx)
	if errors.Is(shutdownErr, context.DeadlineExceeded) {
		shutdownErr = srv.Close()
	}
	<-served
	if cause := context.Cause(electionCtx); ctx.Err() == nil && cause != nil {
		return cause // the server failed, not a signal
	}
	return errors.Join(startErr, shutdownErr)
}
