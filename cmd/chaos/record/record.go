//go:build unix

// Package record is what every process of a chaos run writes and the
// checker reads: the events of a history, one JSON line each, timed on the
// CLOCK_MONOTONIC every process of the host shares; the writer of a history
// file; and a KeyValue that records every call made through it.
package record

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// Event is one line of a history: a worker's (its KV operations, wins,
// stand-downs and fenced acts) or the harness's (faults, kills, pauses).
// Times are CLOCK_MONOTONIC nanoseconds, which every process on the host
// shares and which advances while a process is stopped.
type Event struct {
	T      int64  `json:"t"`
	Worker string `json:"w,omitempty"`
	Kind   string `json:"ev"`
	// Daemon is the daemon an event of a fleet run is about: its KV calls,
	// runs and acts ("" in a single-key run).
	Daemon string `json:"daemon,omitempty"`

	// ev=op: a KV call on the election key, once it returned. Sent is when
	// it was sent. ev=call: the same call as it was about to be sent (no
	// Outcome), so that a call cut short by the process's death, which
	// leaves no ev=op, is still known.
	Op       string `json:"op,omitempty"` // create, update, delete, purge, put
	Key      string `json:"key,omitempty"`
	Expected uint64 `json:"expected,omitempty"` // an update's expected revision (0: no entry)
	Sent     int64  `json:"sent,omitempty"`
	Outcome  string `json:"outcome,omitempty"` // ok, conflict, error
	Rev      uint64 `json:"rev,omitempty"`
	Err      string `json:"err,omitempty"`
	Value    string `json:"value,omitempty"` // what a write wrote; ev=audit: what the stream holds
	// ev=audit: the write required the key's last revision to be Expected.
	Conditional bool `json:"conditional,omitempty"`

	// ev=won, lost, act.
	Token    uint64 `json:"token,omitempty"`
	Cause    string `json:"cause,omitempty"`
	Seq      int    `json:"seq,omitempty"`
	Accepted bool   `json:"accepted,omitempty"`
	Stale    bool   `json:"stale,omitempty"` // act refused: the resource had seen a higher token

	// Harness events: fault, heal, kill, stop, pause, resume, spawn, exit.
	Scenario string `json:"scenario,omitempty"`
	Target   string `json:"target,omitempty"`
	PID      int    `json:"pid,omitempty"`
	// ev=spawn in -supercluster and -leaf: the region of the worker's
	// server.
	Region string `json:"region,omitempty"`
}

// Now reads CLOCK_MONOTONIC. Go's own monotonic readings count from a
// per-process origin, so they cannot be compared across processes.
func Now() int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		panic(fmt.Sprintf("CLOCK_MONOTONIC: %v", err))
	}
	return ts.Nano()
}

// Recorder writes events as JSON lines, one writer at a time.
type Recorder struct {
	mu     sync.Mutex
	enc    *json.Encoder
	worker string
}

// New returns a Recorder that writes to w the events of worker (the
// harness's own: "harness").
func New(w io.Writer, worker string) *Recorder {
	return &Recorder{enc: json.NewEncoder(w), worker: worker}
}

// Record stamps ev with the time (unless set) and the worker (unless set),
// and writes it.
func (r *Recorder) Record(ev Event) {
	if ev.T == 0 {
		ev.T = Now()
	}
	if ev.Worker == "" {
		ev.Worker = r.worker
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.enc.Encode(ev); err != nil {
		fmt.Fprintln(os.Stderr, "history:", err)
	}
}

// Read reads a history file.
func Read(path string) ([]Event, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var events []Event
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		var ev Event
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		events = append(events, ev)
	}
	return events, sc.Err()
}

// reservedPrefix begins the keys the library keeps beside the election
// keys (candidate records, transfer requests): their writes are no lease's.
const reservedPrefix = "_kvelect."

// LeaseWrite reports whether ev is an acknowledged write of an election
// key, a claim or renewal from which a leader counts its validity; a
// candidate record's write, though acknowledged, renews no lease.
func (ev Event) LeaseWrite() bool {
	return ev.Kind == "op" && ev.Outcome == "ok" && (ev.Op == "create" || ev.Op == "update") && !strings.HasPrefix(ev.Key, reservedPrefix)
}
