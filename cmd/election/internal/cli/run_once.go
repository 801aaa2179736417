package cli

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/kvelect/election"
	"github.com/kvelect/election/history"
	"github.com/sirupsen/logrus"
)

// runOnce is run --once: one attempt to lead the key, running COMMAND once
// if it wins (see election.Election.Once), and returns the exit code. With
// the bucket's history (record, nil if none), the run is recorded there, and
// checked there first for a done mark that still stands.
func runOnce(ctx context.Context, e *election.Election, sup *supervisor, cfg runConfig, record *history.History, log *logrus.Entry) (int, error) {
	opts, err := cfg.onceOptions(record)
	if err != nil {
		return 0, err
	}
	log.WithField("wait", cfg.wait.String()).Info("trying once")
	outcome, err := e.Once(ctx, cfg.wait, func(leading context.Context) error {
		sup.lead(leading)
		return sup.onceOutcome()
	}, opts...)
	switch {
	case outcome == election.OnceRan:
		var failed *jobError
		switch {
		case errors.Is(err, election.ErrWorkInterrupted):
			log.Warn("leadership ended before the command did: the key is not marked done")
		case errors.Is(err, election.ErrDoneUnconfirmed):
			log.Warn("the command ran, but the key's done mark could not be confirmed: another host may run the job again")
		case errors.As(err, &failed) && cfg.noRetry:
			log.WithField("status", failed.code).Warn("the job failed; marked done all the same (--no-retry)")
		case errors.As(err, &failed):
			log.WithField("status", failed.code).Warn("the job failed; the key is released for another host to run it")
		}
		return sup.exitCode(), nil
	case err != nil && sup.shuttingDown():
		if sig, ok := sup.sig.(syscall.Signal); ok {
			return 128 + int(sig), nil // interrupted before the command started
		}
		return ExitError, nil
	case outcome == election.OnceUnhealthy:
		log.WithError(err).Warn("not running the command: this host's health check fails")
		return ExitSkipped, nil
	case err != nil:
		return 0, err
	}
	log.WithField("outcome", outcome.String()).Info("not running the command: another host leads the key or ran the job")
	return ExitSkipped, nil
}

// onceOptions are the options of Once the flags ask for: the run log (the
// bucket's history, when it has one), --done-for and --no-retry.
func (cfg *runConfig) onceOptions(record *history.History) ([]election.OnceOption, error) {
	var opts []election.OnceOption
	if record != nil {
		opts = append(opts, election.RecordRuns(runLog{record, &cfg.conn}))
	}
	if cfg.doneFor > 0 {
		if record == nil {
			return nil, fmt.Errorf("--done-for %v needs the bucket's leadership history, which keeps the done mark past the bucket's TTL, and bucket %s has none that this process can use "+
				"(see the line above); add one with: election bucket create --bucket %s --history 7d (an existing bucket is left as it is)",
				formatSpan(cfg.doneFor), cfg.bucket, cfg.bucket)
		}
		if keeps := record.Retention(); cfg.doneFor > keeps-2*election.ServerClockOffset {
			return nil, fmt.Errorf("--done-for %v: the bucket's history keeps records %v, and a done mark must end before its record goes; "+
				"keep the history longer (a new bucket's: election bucket create --history 30d) or mark for less", formatSpan(cfg.doneFor), formatRetention(keeps))
		}
		opts = append(opts, election.DoneFor(cfg.doneFor))
	}
	if cfg.noRetry {
		opts = append(opts, election.NoRetry())
	}
	return opts, nil
}

// runLog is the bucket's history as Once's run log, whose calls end at
// once when the server denies a permission they need, with the denial as
// their error (the history's denials do not end the command by
// themselves).
type runLog struct {
	*history.History
	conn *connFlags
}

func (l runLog) LastRun(ctx context.Context, key string) (election.Run, time.Time, error) {
	ctx, done := l.conn.historyContext(ctx)
	defer done()
	run, now, err := l.History.LastRun(ctx, key)
	return run, now, deniedOr(ctx, err)
}

func (l runLog) AppendRun(ctx context.Context, key string, run election.Run, over uint64) (uint64, error) {
	ctx, done := l.conn.historyContext(ctx)
	defer done()
	seq, err := l.History.AppendRun(ctx, key, run, over)
	return seq, deniedOr(ctx, err)
}

// checkOnce validates the flags of --once beyond --wait: --done-for and
// --no-retry.
func (cfg *runConfig) checkOnce() error {
	switch {
	case cfg.doneFor > 0 && !cfg.once:
		return errors.New("--done-for is for --once: how long the job's done mark lasts")
	case cfg.noRetry && !cfg.once:
		return errors.New("--no-retry is for --once: mark the job done even if it failed")
	case cfg.doneFor > 0 && !cfg.history:
		return errors.New("--done-for with --history=false: the done mark is kept in the bucket's leadership history; drop --history=false")
	}
	return nil
}

// spanFlag is a duration flag that must be above 0 and have a unit, with d
// for days as in 1d: --done-for and --ran-within.
type spanFlag struct{ d *time.Duration }

func (f spanFlag) String() string {
	if f.d == nil || *f.d == 0 {
		return "0"
	}
	return formatSpan(*f.d)
}

func (f spanFlag) Set(value string) error {
	d, err := parseSpan(value)
	if err != nil {
		return err
	}
	*f.d = d
	return nil
}

// parseSpan reads a span such as 90m, 25h, 1d or 1d12h: above 0, with its
// unit.
func parseSpan(value string) (time.Duration, error) {
	d, err := time.Duration(0), error(nil)
	rest := value
	if days, after, ok := strings.Cut(value, "d"); ok {
		var n int
		if n, err = strconv.Atoi(days); err == nil && n >= 0 {
			d, rest = time.Duration(n)*24*time.Hour, after
		}
	}
	if err == nil && rest != "" {
		var more time.Duration
		more, err = time.ParseDuration(rest)
		d += more
	}
	if err != nil || d <= 0 {
		return 0, errors.New("want a duration above 0 with its unit, such as 90m, 25h or 1d")
	}
	return d, nil
}

// formatSpan writes a span as --done-for takes it: 1d, 25h, 1h30m, 90s.
func formatSpan(d time.Duration) string {
	if d > 0 && d%(24*time.Hour) == 0 {
		return strconv.Itoa(int(d/(24*time.Hour))) + "d"
	}
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}
