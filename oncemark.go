package election

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Once's done mark on the election key lasts one TTL: the server ages it out
// then, whatever its value says (a per-message TTL longer than the bucket's
// cannot keep it, and "never", the one that can, needs per-message TTLs on
// the bucket, which cost every election on it a TTL of failover). A mark
// that lasts as long as a schedule needs (DoneFor) is a record in a RunLog
// instead: a store whose records do not age out with the TTL, appended to
// by compare-and-set. docs/failover.md ("Once's done mark") says why.
//
// Every run Once makes with a RunLog is two records there: one written as
// the work starts, by compare-and-set over the latest record it read, and
// one with its outcome, by compare-and-set over the first. The first is the
// proof the check needs: a read of the log may be answered by a server that
// lags behind, but the compare-and-set fails if a newer record exists.

// DoneBy reports whether l is not a holder but Election.Once's done mark,
// and the name of the candidate that ran the work: the mark holds the key,
// like a holder that never renews, until it ages out a TTL after Written.
// A mark that DoneFor made last longer lives in the run log (RunLog).
func (l Leader) DoneBy() (name string, ok bool) {
	return doneBy(l.Name)
}

// Run is a record of one of Election.Once's runs of a key in a RunLog: the
// record Once writes as the work starts (Ended false), or the one with its
// outcome (Ended true).
type Run struct {
	// Seq is the record's sequence in the log, and Stored when the log
	// stored it, by its server's clock; the log sets both.
	Seq    uint64
	Stored time.Time
	// Name is the candidate that ran the work, Token the fencing token of
	// the leadership it ran under.
	Name  string
	Token uint64
	// Ended says the record is the run's outcome; the record Once writes as
	// the work starts has only Name and Token.
	Ended bool
	// Duration is how long the work ran, by the runner's clock.
	Duration time.Duration
	// Delay is how long after the work returned the outcome was sent: the
	// work ended at Stored less Delay, by the log's clock, and began
	// Duration before that.
	Delay time.Duration
	// Status is 0 when the work returned nil; else its error's ExitCode()
	// when the error has that method (as *exec.ExitError and the errors of
	// election run's command do), else 1.
	Status int
	// Error is the work's error, if any.
	Error string
	// Interrupted says the leadership ended, or Once's context was done,
	// before the work returned.
	Interrupted bool
	// DoneFor is how long the done mark this record leaves lasts, from
	// Stored: no Once that records its runs in the log runs the key's work
	// until it has passed by the clock of the server that stored the
	// record (see MarkUntil). 0: no mark.
	DoneFor time.Duration
}

// Succeeded reports whether the record is the outcome of a run whose work
// returned nil while its leadership lasted.
func (r Run) Succeeded() bool {
	return r.Ended && r.Status == 0 && r.Error == "" && !r.Interrupted
}

// MarkUntil is when the record's done mark ends: DoneFor after Stored, plus
// ServerClockOffset, by which the clock of the server that judges may lag
// behind the one that stored it. Zero when the record leaves no mark.
func (r Run) MarkUntil() time.Time {
	if r.DoneFor <= 0 || r.Seq == 0 {
		return time.Time{}
	}
	return r.Stored.Add(r.DoneFor + ServerClockOffset)
}

// standsAt reports whether the record's done mark may still stand when the
// servers' clocks read at least serverNow: a mark that ends by then has
// ended by every server's clock.
func (r Run) standsAt(serverNow time.Time) bool {
	until := r.MarkUntil()
	return !until.IsZero() && serverNow.Before(until)
}

// RunLog is where Election.Once records its runs of a key and keeps the
// done marks they leave, for as long as DoneFor says: a store outside the
// election bucket, whose records do not age out with its TTL.
// history.History, a bucket's leadership history, is one. Every Once of a
// key must record its runs in the same log (RecordRuns) for a mark there
// to keep them all from running the work.
type RunLog interface {
	// LastRun returns the latest record of key's runs (a Run of Seq 0 if
	// there is none) and a reading of the clock of the log's servers,
	// taken during the call. The record may be stale (a server that lags
	// may answer); the reading must not be later than the servers' time.
	LastRun(ctx context.Context, key string) (last Run, serverNow time.Time, err error)
	// AppendRun stores run as key's latest record if the latest is still
	// the record of sequence over (0: key has none), and returns the
	// sequence it was stored at. If another record came after over, it
	// stores nothing and returns an error matching ErrRunConflict.
	AppendRun(ctx context.Context, key string, run Run, over uint64) (seq uint64, err error)
	// Retention is how long the log keeps a record (0: forever). A done
	// mark must end before its record goes.
	Retention() time.Duration
}

// ErrRunConflict is returned by a RunLog's AppendRun when another record of
// the key was stored after the one the append was made over.
var ErrRunConflict = errors.New("election: another run was recorded first")

// ErrRunLog is returned by Election.Once when it won the key but could not
// read or write the run log (RecordRuns) before running the work: the work
// did not run, since a done mark may stand there. The cause is wrapped.
var ErrRunLog = errors.New("election: the run log could not be checked")

// OnceOption configures one Election.Once call.
type OnceOption func(o *onceOptions)

type onceOptions struct {
	log     RunLog
	doneFor time.Duration
	noRetry bool
}

// RecordRuns makes Once record its run in log (two records: as the work
// starts, and its outcome), and check there first that no done mark stands:
// one that a run of any Once with DoneFor left, that lasts as long as that
// run's DoneFor said. Once returns OnceDone without running the work while
// one stands, whatever its own DoneFor. If the log cannot be read or
// written before the work would start, the work does not run, and Once
// returns an error matching ErrRunLog.
func RecordRuns(log RunLog) OnceOption {
	return func(o *onceOptions) { o.log = log }
}

// DoneFor makes the done mark of a successful run last d, from when the
// run log stored its outcome, whatever the bucket's TTL: no Once of the key
// that records its runs in the same log runs the work meanwhile. It needs
// RecordRuns, with a log that keeps records longer than d. Without it the
// mark is the election key's own, and lasts one TTL. When d is a TTL or
// more, the key is marked too, so that Once calls fired within a TTL return
// at once; when d is shorter, the key is released instead, so that nobody,
// a Start-ed candidate of the key included, is kept away longer than d.
func DoneFor(d time.Duration) OnceOption {
	return func(o *onceOptions) { o.doneFor = d }
}

// NoRetry marks the key done whatever the run's outcome: a work that
// returned an error, and, with RecordRuns, a run whose leadership ended
// before the work returned (the log's mark is written by compare-and-set
// over the run's first record, so it lands only if no other run began
// since). With RecordRuns and DoneFor, the run's first record is a mark
// of DoneFor from the start, so a run whose host died before it recorded
// its outcome is not run again within it. For a job that must not run twice even after it failed. Without
// it, only a work that returned nil while this node led marks the key; a
// failed or interrupted run releases it at once, so that another Once (one
// waiting, or the next to fire) runs the work.
func NoRetry() OnceOption {
	return func(o *onceOptions) { o.noRetry = true }
}

// check validates the options for an election of the given TTL.
func (o *onceOptions) check() error {
	switch {
	case o.doneFor < 0:
		return fmt.Errorf("%w: DoneFor %v: want a duration above 0, or no DoneFor for a mark of one TTL", ErrInvalidArgument, o.doneFor)
	case o.doneFor > 0 && o.log == nil:
		return fmt.Errorf("%w: DoneFor %v without RecordRuns: a mark that outlasts the bucket's TTL is kept in a run log (such as the bucket's history: history.Create)", ErrInvalidArgument, o.doneFor)
	case o.doneFor > 0 && o.log.Retention() > 0 && o.doneFor > o.log.Retention()-2*ServerClockOffset:
		return fmt.Errorf("%w: DoneFor %v: the run log keeps records %v, and a mark must end %v before its record goes; want at most %v, or a log that keeps records longer",
			ErrInvalidArgument, o.doneFor, o.log.Retention(), 2*ServerClockOffset, o.log.Retention()-2*ServerClockOffset)
	}
	return nil
}

// marksKey reports whether a run whose log mark was confirmed (logged)
// also marks the election key: always without a log mark, and with one
// only when it lasts a TTL or more (a shorter one would keep candidates
// away longer than it).
func (o *onceOptions) marksKey(logged bool, ttl time.Duration) bool {
	return !logged || o.doneFor == 0 || o.doneFor >= ttl
}

// serverClockAt is a lower bound of the log's servers' clocks at the local
// moment now, from a reading of them that arrived at received: the reading
// plus the time since, as short as a span the local clock measures can be
// by a server's (1 − ρ of it).
func serverClockAt(reading, received, now time.Time) time.Time {
	elapsed := max(now.Sub(received), 0)
	return reading.Add(elapsed * (clockRateDen - clockRateNum) / clockRateDen)
}

// markStands reports whether run's done mark may still stand now, judged
// from a reading of the log's servers' clock that arrived at received, on
// this candidate's clock.
func (c *campaigner) markStands(run Run, reading, received time.Time) bool {
	return run.standsAt(serverClockAt(reading, received, c.e.now()))
}

// standingMark reads the run log once before Once claims the key, and
// returns the done mark that stands there, if one does: a Once fired within
// the mark then stays off the key, and the history shows no win, token or
// stand-down of a leadership that ran nothing. A read that fails, or shows
// no mark (a lagging server may answer), proves nothing: the check made
// once the key is won (checkRuns) decides.
func (c *campaigner) standingMark(ctx context.Context, log RunLog) *Run {
	opCtx, cancel := context.WithTimeout(ctx, c.e.timing.opTimeout)
	defer cancel()
	run, reading, err := log.LastRun(opCtx, c.e.key)
	if err != nil || !c.markStands(run, reading, c.e.now()) {
		return nil
	}
	return &run
}

// exitStatus is the Status a run's record gives err.
func exitStatus(err error) int {
	if err == nil {
		return 0
	}
	var coded interface{ ExitCode() int }
	if errors.As(err, &coded) && coded.ExitCode() != 0 {
		return coded.ExitCode()
	}
	return 1
}

// runLogTries bounds the attempts to read and append a run's first record,
// and to append its outcome, when the log fails or conflicts.
const runLogTries = 5

// checkRuns is what Once does with a run log before the work runs: it reads
// the latest record of the key's runs and, unless a done mark there still
// stands, appends this run's first record over it by compare-and-set, which
// proves that the record read was the latest. It returns that first
// record's sequence, or the standing mark, or why it could do neither
// (matching ErrRunLog).
func (c *campaigner) checkRuns(leading context.Context, token uint64, o *onceOptions) (started uint64, mark *Run, err error) {
	log := o.log
	// Under NoRetry the run's first record is a mark already: a run whose
	// host dies before it records its outcome is not run again either.
	first := Run{Name: c.e.name, Token: token}
	if o.noRetry {
		first.DoneFor = o.doneFor
	}
	var last error
	for try := range runLogTries {
		if try > 0 && !c.e.sleep(leading, firstRetry<<try) {
			break
		}
		opCtx, cancel := context.WithTimeout(leading, c.e.timing.opTimeout)
		run, reading, err := log.LastRun(opCtx, c.e.key)
		received := c.e.now()
		if err != nil {
			cancel()
			last = fmt.Errorf("reading the key's last run: %w", err)
			c.e.log.Warn("could not read the run log; retrying", "error", err)
			continue
		}
		if run.Name == c.e.name && run.Token == token && !run.Ended {
			cancel() // this run's own first record, whose answer was lost
			return run.Seq, nil, nil
		}
		if c.markStands(run, reading, received) {
			cancel()
			c.e.log.Info("the run log shows a done mark that still stands; not running the work",
				"ran_by", run.Name, "stored", run.Stored, "done_for", run.DoneFor)
			return 0, &run, nil
		}
		seq, err := log.AppendRun(opCtx, c.e.key, first, run.Seq)
		cancel()
		switch {
		case err == nil:
			return seq, nil, nil
		case errors.Is(err, ErrRunConflict):
			c.e.log.Info("another record reached the run log first; reading it", "over", run.Seq)
		default:
			last = fmt.Errorf("recording the run's start: %w", err)
			c.e.log.Warn("could not record the run's start; retrying", "error", err)
		}
	}
	if last == nil {
		last = leading.Err()
	}
	return 0, nil, fmt.Errorf("%w: %w", ErrRunLog, last)
}

// recordOutcome appends the run's outcome over its first record, started,
// retrying a failed append; after one whose answer was lost, the log's
// latest record tells whether it landed. It reports whether the outcome is
// in the log.
func (c *campaigner) recordOutcome(log RunLog, started uint64, run Run, ended time.Time) bool {
	ctx := context.Background()
	for try := range runLogTries {
		if try > 0 {
			c.e.sleep(ctx, firstRetry<<try)
		}
		run.Delay = c.e.now().Sub(ended)
		opCtx, cancel := context.WithTimeout(ctx, c.e.timing.opTimeout)
		_, err := log.AppendRun(opCtx, c.e.key, run, started)
		cancel()
		if err == nil {
			return true
		}
		opCtx, cancel = context.WithTimeout(ctx, c.e.timing.opTimeout)
		last, _, readErr := log.LastRun(opCtx, c.e.key)
		cancel()
		switch {
		case readErr == nil && last.Ended && last.Name == run.Name && last.Token == run.Token:
			return true // an earlier try landed
		case errors.Is(err, ErrRunConflict) && readErr == nil && last.Seq > started:
			c.e.log.Warn("another run was recorded after this one began; its outcome is not recorded", "started", started, "latest", last.Seq, "by", last.Name)
			return false
		}
		c.e.log.Warn("could not record the run's outcome; retrying", "error", err)
	}
	return false
}
