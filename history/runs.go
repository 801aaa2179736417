package history

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/kvelect/election"
	"github.com/nats-io/nats.go/jetstream"
)

// A History is also the run log of election.Election.Once (RecordRuns):
// the runs of a key are records on a subject of their own,
// kvelect.history.<bucket>._kvelect.run.<key>, which no key's subject can
// be (keys never start with "_kvelect."). Each is appended by
// compare-and-set on that subject (Nats-Expected-Last-Subject-Sequence):
// the record Once writes as a run starts, over the latest it read, and the
// run's outcome, over that one. The stream keeps them for its retention,
// which no done mark may outlast.

// Kinds of the records of Once's runs.
const (
	RunStarted = "run_started" // a run of Once began: the check found no done mark
	Ran        = "ran"         // a run of Once ended: its outcome
)

// runSubject is the subject of key's run records.
func runSubject(bucket, key string) string {
	return historySubject(bucket) + "._kvelect.run." + key
}

// runRecord is a run's record as the stream stores it: an Event.
func runRecord(key string, r election.Run) Event {
	ev := Event{Key: key, Name: r.Name, Kind: RunStarted, Token: r.Token, DoneFor: r.DoneFor} // a start's DoneFor: a NoRetry run's mark
	if r.Ended {
		ev.Kind = Ran
		ev.Duration, ev.Status, ev.Error, ev.Interrupted = r.Duration, r.Status, r.Error, r.Interrupted
		ev.Delay, ev.Late = r.Delay, r.Delay >= lateAfter
	}
	return ev
}

// Run returns a run's record (Kind RunStarted or Ran) as
// election.Election.Once reads it.
func (ev Event) Run() election.Run {
	return election.Run{
		Seq: ev.Seq, Stored: ev.Recorded, Name: ev.Name, Token: ev.Token, Ended: ev.Kind == Ran,
		Duration: ev.Duration, Delay: ev.Delay, Status: ev.Status, Error: ev.Error, Interrupted: ev.Interrupted, DoneFor: ev.DoneFor,
	}
}

// LastRun returns the latest record of key's runs (a Run of Seq 0 if there
// is none) and the servers' clock, as the stream's leader tells it in
// answer to a request for the stream's state: the run log's side of
// election.RunLog, for election.RecordRuns.
func (h *History) LastRun(ctx context.Context, key string) (election.Run, time.Time, error) {
	if err := election.CheckKey(key); err != nil {
		return election.Run{}, time.Time{}, err
	}
	info, err := h.stream.Info(ctx)
	if err != nil {
		return election.Run{}, time.Time{}, fmt.Errorf("reading the time of the history of bucket %q: %w", h.bucket, err)
	}
	if info.TimeStamp.IsZero() {
		return election.Run{}, time.Time{}, fmt.Errorf("the history of bucket %q: the server does not tell its time (nats-server 2.10 or later does)", h.bucket)
	}
	msg, err := h.stream.GetLastMsgForSubject(ctx, runSubject(h.bucket, key))
	switch {
	case errors.Is(err, jetstream.ErrMsgNotFound):
		return election.Run{}, info.TimeStamp, nil
	case err != nil:
		return election.Run{}, time.Time{}, fmt.Errorf("reading the last run of key %q in the history of bucket %q: %w", key, h.bucket, err)
	}
	var ev Event
	if err := json.Unmarshal(msg.Data, &ev); err != nil {
		return election.Run{}, time.Time{}, fmt.Errorf("the last run of key %q in the history of bucket %q, at sequence %d: %w", key, h.bucket, msg.Sequence, err)
	}
	ev.Seq, ev.Recorded = msg.Sequence, msg.Time
	return ev.Run(), info.TimeStamp, nil
}

// AppendRun stores run as key's latest run record if the latest is still
// the one of sequence over (0: none), and returns its sequence; an error
// matching election.ErrRunConflict if another came after over: the run
// log's side of election.RunLog.
func (h *History) AppendRun(ctx context.Context, key string, run election.Run, over uint64) (uint64, error) {
	if err := election.CheckKey(key); err != nil {
		return 0, err
	}
	data, err := json.Marshal(runRecord(key, run))
	if err != nil {
		return 0, err
	}
	ack, err := h.js.Publish(ctx, runSubject(h.bucket, key), data, jetstream.WithExpectLastSequencePerSubject(over))
	var apiErr *jetstream.APIError
	switch {
	case errors.As(err, &apiErr) && (apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence || apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant):
		return 0, fmt.Errorf("%w: key %q in the history of bucket %q, over sequence %d: %w", election.ErrRunConflict, key, h.bucket, over, err)
	case err != nil:
		return 0, fmt.Errorf("recording a run of key %q in the history of bucket %q: %w", key, h.bucket, err)
	}
	return ack.Sequence, nil
}

// LastRuns returns the latest outcome of key's runs (Kind Ran) and the
// latest successful one, each nil if there is none in the history; in the
// history since the given time (zero: all it keeps).
func (h *History) LastRuns(ctx context.Context, key string, since time.Time) (last, lastSuccess *Event, err error) {
	events, err := h.Events(ctx, key, since)
	if err != nil {
		return nil, nil, err
	}
	for i := range events {
		ev := &events[i]
		if ev.Kind != Ran || ev.Key != key {
			continue
		}
		last = ev
		if ev.Run().Succeeded() {
			lastSuccess = ev
		}
	}
	return last, lastSuccess, nil
}
