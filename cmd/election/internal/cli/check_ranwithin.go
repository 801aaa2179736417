package cli

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/kvelect/election/history"
	"github.com/nats-io/nats.go/jetstream"
)

// checkRanWithin is election check --key K --ran-within D: for each key, a
// job that election run --once runs (or the library's Once with
// history.History as its run log), its runs as the bucket's leadership
// history records them: OK when a run within D succeeded and the latest
// failed not, WARNING when a run within D succeeded but the latest failed,
// CRITICAL when none within D succeeded. now reads the servers' clock,
// which stamps the records.
func checkRanWithin(ctx context.Context, js jetstream.JetStream, r *checkResult, bucket string, keys []string, within time.Duration, now func() time.Time) {
	h, err := history.Open(ctx, js, bucket)
	switch {
	case errors.Is(err, history.ErrNoHistory):
		r.unknown(fmt.Errorf("bucket %q keeps no leadership history, where runs are recorded: add one with election bucket create --bucket %s --history 7d (an existing bucket is left as it is)", bucket, bucket))
		return
	case err != nil:
		r.unknown(err)
		return
	}
	at := now()
	for _, key := range keys {
		last, success, err := h.LastRuns(ctx, key, at.Add(-within))
		if err != nil {
			r.unknown(err)
			return
		}
		judgeRuns(r, key, within, last, success, at)
	}
}

// judgeRuns records the run check of key into r, from the outcome of its
// latest run within the window and of its latest successful one there
// (each nil if none), at the servers' time at.
func judgeRuns(r *checkResult, key string, within time.Duration, last, success *history.Event, at time.Time) {
	failed, age, stamp := 0.0, within+time.Second, 0.0
	if last != nil && !last.Run().Succeeded() {
		failed = 1
	}
	if success != nil {
		age, stamp = max(at.Sub(success.At), 0), float64(success.At.UnixNano())/1e9
	}
	r.perf(perfDatum{Name: "last_success_age:" + key, Value: age.Seconds(), Critical: within.Seconds(), Unit: "s",
		help: "seconds since the end of the job's latest successful run within the window (the window plus 1 s if none)"})
	r.perf(perfDatum{Name: "last_success_timestamp:" + key, Value: stamp, Unit: "s",
		help: "when the job's latest successful run within the window ended, in seconds since 1970 (0 if none)"})
	r.perf(perfDatum{Name: "last_run_failed:" + key, Value: failed, Warning: 1,
		help: "1 if the job's latest run within the window failed, else 0"})
	r.perf(perfDatum{Name: "ran_within:" + key, Value: within.Seconds(), Unit: "s",
		help: "the window a successful run of the job is expected within (--ran-within)"})
	switch {
	case success == nil && last == nil:
		r.critical("%s: no run recorded within %s", key, formatSpan(within))
	case success == nil:
		r.critical("%s: no successful run within %s; the last, %s", key, formatSpan(within), describeRun(last, at))
	case failed == 1:
		r.warn("%s: the last run failed: %s; the last success, %s", key, describeRun(last, at), describeRun(success, at))
	default:
		r.ok("%s ran %s", key, describeRun(success, at))
	}
}

// describeRun says who ran a run, when it ended, how long ago, and how.
func describeRun(ev *history.Event, now time.Time) string {
	s := fmt.Sprintf("by %s at %s (%v ago), status %d after %v", ev.Name, ev.At.UTC().Format(time.RFC3339),
		now.Sub(ev.At).Round(time.Second), ev.Status, ev.Duration.Round(time.Millisecond))
	if ev.Error != "" {
		s += ": " + ev.Error
	}
	return s
}
