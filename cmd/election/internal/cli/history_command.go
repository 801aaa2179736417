package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/kvelect/election/history"
)

const historyAbout = `Usage:
  election history [--bucket B] [--key K] [--since DURATION] [--json]

Prints the leadership history of the bucket B, oldest first: each win, with
how the key became free ("no key": never held or aged out; "released by N";
"handed over to N"; "deleted"; "purged"), and each stand-down, with its
cause; and each run of election run --once, at its start, with its exit
status, how long it ran, why it failed, and the done mark it left ("ran";
"run started" for one whose outcome nobody recorded). --json prints a run
as its two records, "run_started" and "ran" (with duration_ns, status,
error, interrupted and done_for_ns; no status: 0). election run, sidecar, agent and the demo record it by default
(--history=false: not), and the library through history.History.Record, in
the stream the bucket's history lives in: election bucket create makes it
(kept 7 days; --history 30d for longer). A leader that crashed did not
record its end: the next win says how the key became free.

Each event is shown when it happened: a record sent late (its process was
paused or cut off from the servers) is placed by how long after the event
it was sent, and says "recorded ... late"; a leader paused past its
validity deadline stood down at that deadline, and is shown so.

--since 1h prints the last hour only; --json prints one object per line:
  {"key":"K","name":"N","kind":"won","token":7,"after":"released by M","at":"2026-...Z"}
with "delay_ns" (how long after the event it was sent) and "late": true on
a record sent a second or more late.

Exit status: 0; 1 if the server, the bucket or its history failed; 2 for bad
flags.
`

// historyCommand defines the flags of "election history" and returns them
// with the function that runs it.
func historyCommand() (*flagSet, runFunc) {
	fs := newFlagSet("election history", historyAbout)
	var conn connFlags
	conn.add(fs)
	var bucket, key string
	var since time.Duration
	var asJSON bool
	fs.bucketVar(&bucket, "the election bucket's `NAME`")
	fs.StringVar(&key, "key", "", "only this election `KEY`; default every key")
	fs.DurationVar(&since, "since", 0, "only the last `DURATION`; default all the history keeps")
	fs.BoolVar(&asJSON, "json", false, "print one JSON object per line")
	return fs, func(args []string, stdout, stderr io.Writer) int {
		if code, ok := fs.parse(args, stdout, stderr); !ok {
			return code
		}
		switch {
		case fs.NArg() > 0:
			return fs.usageError(stderr, "unexpected argument %q", fs.Arg(0))
		case since < 0:
			return fs.usageError(stderr, "--since %v: want a duration of 0 (all) or more", since)
		}
		if err := checkKeyFlag(key); err != nil {
			return fs.usageError(stderr, "%v", err)
		}

		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		defer stop()
		ctx, cancel := context.WithTimeout(ctx, bucketTimeout)
		defer cancel()
		ctx, stopWatching := conn.watchDenials(ctx, roleObserver)
		defer stopWatching()
		nc, js, err := conn.connect("election history")
		if err != nil {
			return fail(stderr, fs.path, deniedOr(ctx, err))
		}
		defer nc.Close()
		h, err := history.Open(ctx, js, bucket)
		switch {
		case errors.Is(err, history.ErrNoHistory):
			return fail(stderr, fs.path, fmt.Errorf("bucket %q keeps no leadership history; start one with: election bucket create --bucket %s --history 7d (an existing bucket is left as it is)", bucket, bucket))
		case err != nil:
			return fail(stderr, fs.path, deniedOr(ctx, err))
		}
		var from time.Time
		if since > 0 {
			from = time.Now().Add(-since)
		}
		events, err := h.Events(ctx, key, from)
		if err != nil {
			return fail(stderr, fs.path, deniedOr(ctx, err))
		}
		printHistory(stdout, events, asJSON)
		return ExitOK
	}
}

func printHistory(w io.Writer, events []history.Event, asJSON bool) {
	if asJSON {
		for _, ev := range events {
			printJSONLine(w, historyJSON{ev, ev.At.UTC()})
		}
		return
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "TIME\tKEY\tEVENT\tNAME\tTOKEN\tDETAIL")
	for _, l := range printedLines(events) {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", l.at.Local().Format("2006-01-02 15:04:05.000"),
			l.ev.Key, strings.ReplaceAll(l.ev.Kind, "_", " "), l.ev.Name, strconv.FormatUint(l.ev.Token, 10), l.detail)
	}
	tw.Flush()
}
