package election

import (
	"context"
	"log/slog"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/kvelect/election/internal/testenv"
	"github.com/nats-io/nats.go/jetstream"
)

// What a node logs when the work of its last leadership outlives it: the
// lines name no callback (users of the commands never wrote one), and their
// figures agree with what they say.

const (
	workNotStopped = "the work of the last leadership had not stopped by the last moment the key could be released for it"
	pausedPast     = "this process was paused or starved of CPU past the last moment the key could be released for the last leadership"
	notCampaigning = "the work of the last leadership has not stopped; not campaigning until it does"
	campaignsAgain = "the work of the last leadership stopped; campaigning again"
)

// stuckLeader starts a leader "a" of key "k" at TTL 2 s on clk whose OnWon
// ignores its context until the test ends or release is called, and
// returns once it leads.
func stuckLeader(t *testing.T, bucket string, clk Clock, logs *syncBuffer) (kv jetstream.KeyValue, release func()) {
	t.Helper()
	s := testenv.Server(t)
	_, js := testenv.Connect(t, s.ClientURL())
	kv = testenv.Bucket(t, js, jetstream.KeyValueConfig{Bucket: bucket, TTL: 2 * time.Second})
	won := make(chan struct{}, 4)
	stuck := make(chan struct{})
	opts := []Option{WithoutSplay(), WithLogger(slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))),
		OnWon(func(context.Context) {
			won <- struct{}{}
			<-stuck
		})}
	if clk != nil {
		opts = append(opts, WithClock(clk))
	}
	e, err := NewElection(context.Background(), "a", "k", kv, opts...)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); e.Start(context.Background()) }() //nolint:errcheck // stopped below
	var once bool
	release = func() {
		if !once {
			once = true
			close(stuck)
		}
	}
	t.Cleanup(func() { release(); e.Stop(); <-done })
	select {
	case <-won:
	case <-time.After(10 * time.Second):
		t.Fatal("a did not lead")
	}
	return kv, release
}

// logLine returns the first line of logs holding msg, "" if none.
func logLine(logs *syncBuffer, msg string) string {
	for _, l := range strings.Split(logs.String(), "\n") {
		if strings.Contains(l, msg) {
			return l
		}
	}
	return ""
}

// awaitLogLine waits for a line holding msg and returns it.
func awaitLogLine(t *testing.T, logs *syncBuffer, msg string, timeout time.Duration) string {
	t.Helper()
	return testenv.Poll(t, "the log line "+msg, timeout, func() (string, bool) {
		l := logLine(logs, msg)
		return l, l != ""
	})
}

// durationAttr parses the duration attribute name of a text log line.
func durationAttr(t *testing.T, line, name string) time.Duration {
	t.Helper()
	m := regexp.MustCompile(`\b` + name + `=(\S+)`).FindStringSubmatch(line)
	if m == nil {
		t.Fatalf("no %s in %q", name, line)
	}
	d, err := time.ParseDuration(m[1])
	if err != nil {
		t.Fatalf("%s in %q: %v", name, line, err)
	}
	return d
}

// TestStuckWorkIsLoggedAsTheLeadershipsWork: a leader whose work ignores
// the end of its leadership sees its key deleted. It waits for the work
// until its work deadline and says so with the time it waited, then does
// not campaign until the work stops, and says when it does.
func TestStuckWorkIsLoggedAsTheLeadershipsWork(t *testing.T) {
	t.Parallel()
	logs := &syncBuffer{}
	kv, release := stuckLeader(t, "WORKLOG_STUCK", nil, logs)
	if err := kv.Delete(context.Background(), "k"); err != nil {
		t.Fatal(err)
	}
	line := awaitLogLine(t, logs, workNotStopped, 10*time.Second)
	waited := durationAttr(t, line, "waited")
	t.Logf("%s", line)
	if waited <= 0 {
		t.Errorf("the work had not stopped, yet the line says it waited %v for it: %q", waited, line)
	}
	if strings.Contains(line, "late_by") || strings.Contains(line, "deadline_passed") {
		t.Errorf("a node that waited up to its deadline reports having passed it: %q", line)
	}
	awaitLogLine(t, logs, notCampaigning, 10*time.Second)
	if l := logLine(logs, campaignsAgain); l != "" {
		t.Fatalf("campaigning again while the work still runs: %q", l)
	}
	release()
	awaitLogLine(t, logs, campaignsAgain, 10*time.Second)
	if out := logs.String(); strings.Contains(out, "OnWon") || logLine(logs, pausedPast) != "" {
		t.Errorf("the log names a library callback or blames a pause that did not happen:\n%s", out)
	}
}

// TestAPauseIsLoggedAsAPause: a leader's clock jumps 6 s (three TTLs), as
// it does for a process stopped or starved of CPU that long. By the time it
// looks, the last moment to release the key for its work is long past: it
// says so, with how late it is, and not that it waited for the work.
func TestAPauseIsLoggedAsAPause(t *testing.T) {
	t.Parallel()
	const jump = 6 * time.Second
	logs := &syncBuffer{}
	clk := newSkewedClock(1)
	stuckLeader(t, "WORKLOG_PAUSED", clk, logs)
	clk.jump(jump)
	line := awaitLogLine(t, logs, pausedPast, 10*time.Second)
	t.Logf("%s", line)
	late := durationAttr(t, line, "late_by")
	// The key could be released for the work until a TTL (2 s) after the
	// leader's last write, sent at most an interval (1.5 s) before the jump.
	if late < jump-2*time.Second || late > jump {
		t.Errorf("late_by=%v after a jump of %v, want between %v and %v: %q", late, jump, jump-2*time.Second, jump, line)
	}
	if strings.Contains(line, "waited") || logLine(logs, workNotStopped) != "" {
		t.Errorf("a paused node says it waited for the work:\n%s", logs.String())
	}
}
