package main

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// With -procs, each candidate runs in a child process: the bench binary
// started again as "bench candidate -system … -ttl … -addr … -election …
// -id …". The child connects through addr, its fault proxy in the parent,
// and speaks lines over stdin and stdout.
//
// Parent to child, one command per line:
//
//	campaign        candidate.campaign
//	resign          candidate.resign, answered by "resigned" once it returns
//	(end of stdin)  candidate.close, then the child exits
//
// Child to parent, one line each:
//
//	ready                  connected; sent once, first
//	<kind> <ns> [error]    an event: campaigning, won, lost or failed, at
//	                       CLOCK_MONOTONIC ns; a first line "failed <ns>
//	                       <error>" instead of ready means it could not connect
//	resigned
const candidateCommand = "candidate"

// kindNames are the events' names on the wire.
var kindNames = map[eventKind]string{campaigning: "campaigning", won: "won", lost: "lost", failed: "failed"}

// runIfCandidate runs the child side of -procs and exits if this process
// was started as one; otherwise it returns at once.
func runIfCandidate() {
	if len(os.Args) < 2 || os.Args[1] != candidateCommand {
		return
	}
	if err := runCandidate(os.Args[2:], os.Stdin, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "bench candidate:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

// runCandidate connects one candidate, exactly as the in-process bench
// does, and drives it by the commands on in until in ends.
func runCandidate(args []string, in io.Reader, out io.Writer) error {
	fs := flag.NewFlagSet(candidateCommand, flag.ContinueOnError)
	name := fs.String("system", "", "kvelect or etcd")
	ttl := fs.Duration("ttl", 0, "the run's TTL")
	addr := fs.String("addr", "", "host:port of the candidate's fault proxy")
	election := fs.String("election", "", "election key (kvelect) or prefix (etcd)")
	id := fs.Int("id", 0, "candidate number within the election")
	if err := fs.Parse(args); err != nil {
		return err
	}
	w := &lineWriter{w: bufio.NewWriter(out)}
	sys, err := clientSide(*name, *ttl)
	if err != nil {
		return err
	}
	events := make(chan event, eventBuffer)
	c, err := sys.newCandidate(*addr, *election, *id, events)
	if err != nil {
		w.event(event{kind: failed, at: time.Now(), err: err})
		return err
	}
	written := make(chan struct{})
	go func() {
		defer close(written)
		for ev := range events {
			w.event(ev)
		}
	}()
	w.line("ready")
	sc := bufio.NewScanner(in)
	for sc.Scan() {
		switch cmd := sc.Text(); cmd {
		case "campaign":
			c.campaign()
		case "resign":
			c.resign()
			w.line("resigned")
		default:
			err = errors.Join(err, fmt.Errorf("unknown command %q", cmd))
		}
	}
	c.close()
	close(events)
	<-written
	return errors.Join(err, sc.Err())
}

// clientSide returns the system called name without a server: its
// newCandidate connects to an address like the parent's does, and it is
// good for nothing else.
func clientSide(name string, ttl time.Duration) (system, error) {
	for _, sys := range []system{&kvelectSystem{ttl: ttl}, &etcdSystem{ttl: ttl}} {
		if sys.name() == name {
			return sys, nil
		}
	}
	return nil, fmt.Errorf("-system %q: want kvelect or etcd", name)
}

// lineWriter writes whole lines from several goroutines.
type lineWriter struct {
	mu sync.Mutex
	w  *bufio.Writer
}

func (lw *lineWriter) line(s string) {
	lw.mu.Lock()
	defer lw.mu.Unlock()
	lw.w.WriteString(s + "\n")
	lw.w.Flush()
}

// event writes ev with its time on CLOCK_MONOTONIC, and its error on one
// line.
func (lw *lineWriter) event(ev event) {
	s := kindNames[ev.kind] + " " + strconv.FormatInt(clock.toMono(ev.at), 10)
	if ev.err != nil {
		s += " " + strings.ReplaceAll(ev.err.Error(), "\n", " ")
	}
	lw.line(s)
}

// parseEvent reads an event line; ok is false if line is not one.
func parseEvent(line string) (ev event, ok bool) {
	fields := strings.SplitN(line, " ", 3)
	if len(fields) < 2 {
		return event{}, false
	}
	ns, err := strconv.ParseInt(fields[1], 10, 64)
	if err != nil {
		return event{}, false
	}
	for kind, name := range kindNames {
		if name == fields[0] {
			ev = event{kind: kind, at: clock.toTime(ns)}
			if len(fields) == 3 {
				ev.err = errors.New(fields[2])
			}
			return ev, true
		}
	}
	return event{}, false
}

// epoch pairs a CLOCK_MONOTONIC reading with time.Now read right after it.
// Go's own monotonic readings count from a per-process origin, so events
// cross between processes as CLOCK_MONOTONIC ns, which every process on the
// host shares. On Linux Go's monotonic clock is CLOCK_MONOTONIC, so the
// conversion is off only by the few ns between the two readings.
type epoch struct {
	ns int64
	at time.Time
}

// clock is this process's epoch, read once when it starts.
var clock = epoch{ns: monotonicNow(), at: time.Now()}

// toMono returns t, a time.Now of this process, as CLOCK_MONOTONIC ns.
func (e epoch) toMono(t time.Time) int64 { return e.ns + int64(t.Sub(e.at)) }

// toTime returns CLOCK_MONOTONIC ns as a time of this process, whose
// monotonic reading makes it comparable with time.Now.
func (e epoch) toTime(ns int64) time.Time { return e.at.Add(time.Duration(ns - e.ns)) }

// monotonicNow reads CLOCK_MONOTONIC.
func monotonicNow() int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		panic(fmt.Sprintf("CLOCK_MONOTONIC: %v", err))
	}
	return ts.Nano()
}
