package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/kvelect/election"
	"github.com/kvelect/election/history"
	"github.com/kvelect/election/internal/embedded"
	"github.com/kvelect/election/internal/slogrus"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/sirupsen/logrus"
)

const bucket = "DEMO_ELECTION"

// maxWorkers bounds WORKERS: the demo shows an election among a handful of
// processes' worth of candidates, and sets 1,000 up in well under a second.
// More is a load test, which BenchmarkScale in integration/ measures.
const maxWorkers = 1000

type config struct {
	workers   int
	key       string
	noSplay   bool
	conn      connFlags // NATS_URL, NATS_CONTEXT (or CONTEXT) and the nats CLI's other variables
	ttl       time.Duration
	ttlGiven  bool // TTL was set: an existing bucket must have it
	logFormat string
	logLevel  string
}

// Demo runs the demo as configured by the environment and returns the
// process's exit code.
func Demo() int {
	log := logrus.New()
	cfg, err := configFromEnv()
	if err == nil {
		err = configureLog(log, cfg)
	}
	if err != nil {
		log.WithError(err).Error("election demo: bad setting")
		return ExitUsage
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, log, cfg); err != nil {
		log.WithError(err).Error("election demo failed")
		return ExitError
	}
	return ExitOK
}

func configFromEnv() (config, error) {
	cfg := config{
		workers:   10,
		key:       envOr("KEY", "demo"),
		noSplay:   os.Getenv("NOSPLAY") == "1",
		conn:      connFlags{context: os.Getenv("CONTEXT")},
		ttl:       10 * time.Second,
		logFormat: os.Getenv("LOG_FORMAT"),
		logLevel:  envOr("LOG_LEVEL", "info"),
	}
	if v := os.Getenv("WORKERS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > maxWorkers {
			return cfg, fmt.Errorf("WORKERS=%q: want a whole number from 1 to %d", v, maxWorkers)
		}
		cfg.workers = n
	}
	if v := os.Getenv("TTL"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			return cfg, fmt.Errorf("TTL=%q: want a duration such as 10s", v)
		}
		if d < election.MinTTL || d > election.MaxTTL {
			return cfg, fmt.Errorf("TTL=%q: want %v to %v", v, election.MinTTL, election.MaxTTL)
		}
		cfg.ttl, cfg.ttlGiven = d, true
	}
	if err := election.CheckKey(cfg.key); err != nil {
		return cfg, fmt.Errorf("KEY=%q: %w", cfg.key, err)
	}
	if err := cfg.conn.check(); err != nil {
		return cfg, fmt.Errorf("NATS_* connection settings: %w", err)
	}
	return cfg, nil
}

func configureLog(log *logrus.Logger, cfg config) error {
	return setupLog(log, cfg.logFormat, cfg.logLevel, "LOG_FORMAT=", "LOG_LEVEL=")
}

func envOr(name, fallback string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return fallback
}

func run(ctx context.Context, log *logrus.Logger, cfg config) error {
	cfg.conn.quietHistory() // shared with connect's copy
	nc, js, shutdown, err := connect(log, cfg)
	if err != nil {
		return err
	}
	defer shutdown()
	defer nc.Close()

	kv, err := bindBucket(ctx, log, js, cfg)
	if err != nil && ctx.Err() != nil { // a signal while binding
		log.Info("stopped during set-up")
		return nil
	}
	if err != nil {
		return err
	}

	server := redactURLs(nc.ConnectedUrlRedacted()) // for the commands the demo suggests
	record := demoHistory(ctx, log, js, &cfg.conn, server)

	host, _ := os.Hostname()
	elections := make([]*election.Election, cfg.workers)
	for i := range elections {
		if ctx.Err() != nil { // a signal during set-up: nothing campaigns yet
			log.Info("stopped during set-up")
			return nil
		}
		name := fmt.Sprintf("%s-%d-w%d", host, os.Getpid(), i)
		e, err := newWorker(log, name, cfg, kv, record, connectionOptions(nc)...)
		if err != nil {
			return err
		}
		elections[i] = e
	}
	log.WithFields(logrus.Fields{"workers": cfg.workers, "bucket": bucket, "key": cfg.key}).
		Infof("campaigning; from another terminal, hand over: election resign -s %s --bucket %s --key %s",
			server, bucket, cfg.key)

	done := make(chan struct{})
	for _, e := range elections {
		go func() {
			if err := e.Start(ctx); err != nil {
				log.WithError(err).Error("election ended")
			}
			done <- struct{}{}
		}()
	}
	for range elections {
		<-done
	}
	log.Info("all workers stopped")
	return nil
}

// newWorker prepares one worker's election with callbacks that log its
// events and do its work while it leads, recording in the history record
// (nil: none), with the extra options (the candidate's metadata) last.
func newWorker(log *logrus.Logger, name string, cfg config, kv jetstream.KeyValue, record *history.History, extra ...election.Option) (*election.Election, error) {
	wlog := log.WithField("worker", name)
	opts := []election.Option{
		election.WithLogger(libraryLogger(log).With("worker", name)),
		// Every worker campaigns from its start; only those that find the
		// key free claim it.
		election.WithEventHook(func(ev election.Event) {
			if ev.Kind == election.EventCampaigning {
				wlog.WithField("event", "campaign").Info("campaigning")
			}
		}),
		election.OnCampaign(func(s election.State) {
			if s == election.LeaderState {
				wlog.WithField("event", "renew").Debug("renewing leadership")
				return
			}
			wlog.WithField("event", "claim").Debug("claiming the key")
		}),
		election.OnWon(func(ctx context.Context) {
			token, _ := election.TokenFromContext(ctx)
			wlog.WithFields(logrus.Fields{"event": "won", "token": token}).Info("became leader")
			doWork(ctx, wlog.WithField("token", token))
		}),
		election.OnLost(func(cause error) {
			entry := wlog.WithFields(logrus.Fields{"event": "lost", "cause": cause.Error()})
			if errors.Is(cause, election.ErrStopped) {
				entry.Info("stopped leading")
				return
			}
			entry.Warn("lost leadership")
		}),
	}
	if cfg.noSplay {
		opts = append(opts, election.WithoutSplay())
	}
	if record != nil {
		opts = append(opts, election.WithEventHook(record.Record))
	}
	opts = append(opts, extra...)
	return election.NewElection(context.Background(), name, cfg.key, kv, opts...)
}

// doWork stands for a leader's singleton work: once a second until
// leadership ends.
func doWork(ctx context.Context, log *logrus.Entry) {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for n := 1; ; n++ {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			log.WithFields(logrus.Fields{"event": "work", "n": n}).Info("doing leader work")
		}
	}
}

// connect connects to NATS_URL or through the nats CLI context in CONTEXT
// or NATS_CONTEXT, with the nats CLI's other NATS_* settings, or else to an
// embedded server it starts. shutdown stops what it started.
func connect(log *logrus.Logger, cfg config) (nc *nats.Conn, js jetstream.JetStream, shutdown func(), err error) {
	if cfg.conn.server != "" || cfg.conn.context != "" {
		cfg.conn.role = roleCandidate
		cfg.conn.onDenied = func(denied error) { log.Error(denied.Error()) }
		nc, js, err = cfg.conn.connect("election demo")
		if err != nil {
			return nil, nil, nil, err
		}
		log.WithField("server", redactURLs(nc.ConnectedUrlRedacted())).Info("connected to NATS")
		return nc, js, func() {}, nil
	}

	dir, err := os.MkdirTemp("", "election-demo-")
	if err != nil {
		return nil, nil, nil, err
	}
	s, err := embedded.Server(dir)
	if err != nil {
		os.RemoveAll(dir)
		return nil, nil, nil, err
	}
	stop := func() {
		embedded.Shutdown(s)
		os.RemoveAll(dir)
	}
	log.WithField("url", s.ClientURL()).Infof("started an embedded nats-server %s; see who leads with: election status -s %s --bucket %s", server.VERSION, s.ClientURL(), bucket)
	nc, err = nats.Connect(s.ClientURL(), nats.Name("election demo"), nats.MaxReconnects(-1))
	if err == nil {
		js, err = jetstream.New(nc)
	}
	if err != nil {
		if nc != nil {
			nc.Close()
		}
		stop()
		return nil, nil, nil, err
	}
	return nc, js, stop, nil
}

// bindBucket binds to DEMO_ELECTION, creating it with the TTL cfg says if
// it is missing. An existing bucket must have that TTL if TTL was set.
func bindBucket(ctx context.Context, log *logrus.Logger, js jetstream.JetStream, cfg config) (jetstream.KeyValue, error) {
	ttl := cfg.ttl
	kv, err := js.KeyValue(ctx, bucket)
	if err == nil {
		if !cfg.ttlGiven {
			return kv, nil
		}
		status, err := kv.Status(ctx)
		if err != nil {
			return nil, fmt.Errorf("reading bucket %s: %w", bucket, err)
		}
		if status.TTL() != ttl {
			return nil, fmt.Errorf("TTL=%v, but bucket %s exists with TTL %v: a bucket's TTL cannot change under running elections; unset TTL to run at %v",
				ttl, bucket, status.TTL(), status.TTL())
		}
		return kv, nil
	}
	if !errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil, fmt.Errorf("binding bucket %s: %w", bucket, err)
	}
	kv, err = election.CreateBucket(ctx, js, election.BucketConfig{Name: bucket, TTL: ttl})
	if err != nil {
		return nil, fmt.Errorf("creating bucket %s: %w", bucket, err)
	}
	log.WithFields(logrus.Fields{"bucket": bucket, "ttl": ttl}).Info("bucket was missing; created it")
	return kv, nil
}

// demoHistory makes the leadership history of the demo's bucket, or opens
// the one it has, for the workers to record in: election history --bucket
// DEMO_ELECTION prints it. Without it (a denied permission), one warning,
// and the workers run the same.
func demoHistory(ctx context.Context, log *logrus.Logger, js jetstream.JetStream, conn *connFlags, server string) *history.History {
	historyCtx, done := conn.historyContext(ctx)
	defer done()
	h, err := history.Create(historyCtx, js, bucket, 0, history.WithLogger(slogrus.New(log)))
	if err != nil {
		if ctx.Err() != nil {
			return nil // a signal: the demo stops
		}
		log.WithError(deniedOr(historyCtx, err)).Warn("no leadership history for the demo's bucket: not recording one; the workers run the same")
		return nil
	}
	log.WithFields(logrus.Fields{"bucket": bucket, "retention": formatRetention(h.Retention())}).
		Infof("recording the leadership history: election history -s %s --bucket %s", server, bucket)
	return h
}

// libraryLogger is the library's logger in the demo: the demo logs each
// worker's events itself, so the library's own account of them (won the
// key, leading, released) shows only at LOG_LEVEL=debug; its warnings and
// errors always show.
func libraryLogger(log *logrus.Logger) *slog.Logger {
	if log.IsLevelEnabled(logrus.DebugLevel) {
		return slogrus.New(log)
	}
	return slogrus.NewAtLeast(log, slog.LevelWarn)
}
