//go:build unix

// Package worker holds the processes the chaos harness runs by running its
// own binary again: a campaigner for one key (RunWorker), a fleet's node
// (RunNode) and an -agents run's daemon work (RunActor), each recording its
// history (package record); and what they share with the harness: the
// bucket, the fenced resource, the actors' environment, Retry.
package worker

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/kvelect/election"
	"github.com/kvelect/election/cmd/chaos/record"
	"github.com/kvelect/election/fence"
	lhistory "github.com/kvelect/election/history"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// BucketName is the election bucket of a run, and ElectionKey the key of a
// single-key run's election.
const (
	BucketName  = "CHAOS_ELECTION"
	ElectionKey = "leader"
)

// StartTimeout bounds the start of a process, a retried call, and the
// servers' recovery.
const StartTimeout = 60 * time.Second

// Retry calls f, each time with attempt to finish, until it succeeds or
// StartTimeout passes.
func Retry(ctx context.Context, attempt time.Duration, f func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, StartTimeout)
	defer cancel()
	for {
		callCtx, callCancel := context.WithTimeout(ctx, attempt)
		err := f(callCtx)
		callCancel()
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return err
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// actInterval is how often a leader acts on the fenced resource.
const actInterval = 50 * time.Millisecond

// FenceSubject is the fenced resource, a subject of FenceStream (a subject
// of its own under it for each daemon) that leaders append to through
// package fence's stream fence, with their token in each message's
// Fencing-Token header: the fence refuses tokens lower than the last.
const (
	FenceStream  = "CHAOS_FENCE"
	FenceSubject = "chaos.fence"
)

// RunWorker is one campaigner process. It writes its history to stdout and
// stops gracefully on SIGTERM. While it leads it acts on the fenced resource;
// its OnWon records won when it starts and returned when it returns. Once
// its election has stopped it exits when its stdin closes: the harness
// holds it until a successor leads.
func RunWorker(args []string) error {
	fs := flag.NewFlagSet("worker", flag.ContinueOnError)
	name := fs.String("name", "", "candidate name")
	urls := fs.String("urls", "", "NATS URLs, comma separated")
	bucket := fs.String("bucket", "", "election bucket")
	domain := fs.String("domain", "", "the bucket's JetStream domain (empty: the server's own)")
	key := fs.String("key", "", "election key")
	unsafeTTL := fs.Bool("unsafe-short-ttl", false, "allow TTLs below election.MinTTL")
	priority := fs.Int("priority", election.DefaultPriority, "the candidate's priority")
	preferHigher := fs.Duration("prefer-higher", 0, "hand over to a higher priority listed this long (0: never)")
	stopDelay := fs.Duration("stop-delay", 0, "after the leadership context is cancelled, go on acting this long before OnWon returns, never past the work deadline (0: return at once)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	rec := record.New(os.Stdout, *name)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()

	c, err := connectWorker(ctx, *name, *urls, *bucket, *domain, func(server string) {
		rec.Record(record.Event{Kind: "connected", Target: server}) // which server client faults of a cluster aim at
	})
	if err != nil {
		return err
	}
	defer c.nc.Close()
	js, kv, fenced := c.js, c.kv, c.fence
	var history *lhistory.History
	err = Retry(ctx, 5*time.Second, func(ctx context.Context) error { // as connectWorker binds the bucket
		history, err = lhistory.Open(ctx, js, *bucket)
		return err
	})
	if err != nil {
		return err
	}

	acked := make(chan struct{}, 1)
	opts := []election.Option{
		election.WithoutSplay(),
		election.OnWon(func(leading context.Context) {
			token, _ := election.TokenFromContext(leading)
			rec.Record(record.Event{Kind: "won", Token: token})
			context.AfterFunc(leading, func() { rec.Record(record.Event{Kind: "lost", Token: token}) })
			// Work that takes time to stop (a command on SIGTERM, a daemon
			// draining) goes on acting with its token for the stop delay
			// after its context is cancelled; no successor may lead before
			// it returned (checkWork).
			r := Fence{Worker: *name}
			deadline := trackWorkDeadline(leading, acked)
			actUntilDone(leading, fenced, rec, FenceSubject, "", token, r)
			if *stopDelay > 0 {
				stopping, cancel := context.WithDeadline(context.Background(), earliest(time.Now().Add(*stopDelay), deadline()))
				actUntilDone(stopping, fenced, rec, FenceSubject, "", token, r)
				cancel()
			}
			rec.Record(record.Event{Kind: "returned", Token: token})
		}),
		election.OnLost(func(cause error) { rec.Record(record.Event{Kind: "cause", Cause: cause.Error()}) }),
	}
	if *unsafeTTL {
		opts = append(opts, election.WithUnsafeShortTTL())
	}
	opts = append(opts, election.WithPriority(*priority), election.WithEventHook(history.Record))
	if *preferHigher > 0 {
		opts = append(opts, election.WithPreferHigher(*preferHigher))
	}
	e, err := election.NewElection(ctx, *name, *key, &record.KV{KeyValue: kv, Rec: rec, Acked: acked}, opts...)
	if err != nil {
		return err
	}
	rec.Record(record.Event{Kind: "start", PID: os.Getpid()})
	err = e.Start(ctx)
	rec.Record(record.Event{Kind: "exit"})
	io.Copy(io.Discard, os.Stdin)
	return err
}

// trackWorkDeadline follows election.WorkDeadline of the leadership whose
// context is leading until it ends, and returns the last deadline read: it
// reads it every actInterval, and at once when acked says a write of the
// worker's was acknowledged, until the library has moved it (a renewal
// moves it later just after it returns). The deadline only moves later, so
// the last one read is never past the library's. Work that takes time to
// stop ends by it at the latest, as election run's guard kills its command
// then: the library may let a successor lead once it has passed.
func trackWorkDeadline(leading context.Context, acked <-chan struct{}) func() time.Time {
	var mu sync.Mutex
	last, _ := election.WorkDeadline(leading)
	read := func() (moved, ok bool) {
		d, ok := election.WorkDeadline(leading)
		mu.Lock()
		defer mu.Unlock()
		if ok && d.After(last) {
			last, moved = d, true
		}
		return moved, ok
	}
	go func() {
		tick := time.NewTicker(actInterval)
		defer tick.Stop()
		for {
			select {
			case <-leading.Done():
				return
			case <-tick.C:
				read()
			case <-acked:
				for range 50 { // for up to about 5 ms
					if moved, ok := read(); moved || !ok {
						break
					}
					time.Sleep(100 * time.Microsecond)
				}
			}
		}
	}()
	return func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		return last
	}
}

// earliest returns the earlier of a and b.
func earliest(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// workerConn is a worker's or node's connection, and what it binds.
type workerConn struct {
	nc    *nats.Conn
	js    jetstream.JetStream
	kv    jetstream.KeyValue // the election bucket
	fence *fence.Stream      // the fenced resource
}

// connectWorker connects a worker or node process to urls, only ever
// through them (the proxies: a cluster gossips its servers' own addresses,
// which would bypass the faults), and binds the bucket and the fence in
// JetStream domain (empty: the server's own). Each of onConnect learns the
// server's name on the connection and on every reconnection.
func connectWorker(ctx context.Context, name, urls, bucket, domain string, onConnect ...func(server string)) (*workerConn, error) {
	connected := func(nc *nats.Conn) {
		for _, f := range onConnect {
			f(nc.ConnectedServerName())
		}
	}
	nc, err := nats.Connect(urls, nats.Name(name), nats.MaxReconnects(-1),
		nats.ReconnectWait(100*time.Millisecond), nats.RetryOnFailedConnect(true),
		nats.IgnoreDiscoveredServers(), nats.ConnectHandler(connected), nats.ReconnectHandler(connected))
	if err != nil {
		return nil, err
	}
	if nc.IsConnected() { // the handler runs only for a connection that had to be retried
		connected(nc)
	}
	c := &workerConn{nc: nc}
	if domain == "" {
		c.js, err = jetstream.New(nc)
	} else {
		c.js, err = jetstream.NewWithDomain(nc, domain)
	}
	if err == nil {
		// Right after a fault the cluster may not answer yet (a stream
		// leader being elected): retry, as the servers' users would.
		err = Retry(ctx, 5*time.Second, func(ctx context.Context) error {
			var err error
			if c.kv, err = c.js.KeyValue(ctx, bucket); err != nil {
				return fmt.Errorf("binding bucket %s: %w", bucket, err)
			}
			s, err := c.js.Stream(ctx, FenceStream)
			if err != nil {
				return fmt.Errorf("binding stream %s: %w", FenceStream, err)
			}
			c.fence, err = fence.NewStream(c.js, s)
			return err
		})
	}
	if err != nil {
		nc.Close()
		return nil, err
	}
	return c, nil
}

// Fence is the body of what a leader appends to the fenced resource, its
// token being in the message's Fencing-Token header (package fence's wire
// form), with the time it sent the append. An -agents run's actor adds its
// process ID: an append of an actor killed before it could record the act
// is its last sign of life.
type Fence struct {
	Worker string `json:"w"`
	Seq    int    `json:"seq"`
	PID    int    `json:"pid,omitempty"`
	Sent   int64  `json:"sent,omitempty"`
}

// actUntilDone appends r to the fenced resource's subject with token every
// actInterval until leadership ends, through package fence's stream fence:
// it appends unless the subject's last message carries a higher token
// (stale), by compare-and-set on that message's sequence. Its acts are
// recorded for daemon ("" in a single-key run).
func actUntilDone(leading context.Context, fenced *fence.Stream, rec *record.Recorder, subject, daemon string, token uint64, r Fence) {
	tick := time.NewTicker(actInterval)
	defer tick.Stop()
	for seq := 1; ; seq++ {
		select {
		case <-leading.Done():
			return
		case <-tick.C:
		}
		sent := record.Now()
		ctx, cancel := context.WithTimeout(leading, time.Second)
		r.Seq = seq
		r.Sent = sent
		data, _ := json.Marshal(r)
		_, err := fenced.Append(ctx, subject, token, data)
		cancel()
		ev := record.Event{Kind: "act", Daemon: daemon, Sent: sent, Token: token, Seq: seq, Accepted: err == nil, Stale: errors.Is(err, fence.ErrStale)}
		if err != nil && !ev.Stale {
			ev.Err = err.Error()
		}
		rec.Record(ev)
	}
}
