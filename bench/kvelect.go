package main

import (
	"context"
	"fmt"
	"os"
	"sync"
	"time"

	election "github.com/kvelect/election"
	"github.com/kvelect/election/internal/embedded"
	natsserver "github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// bucketName is the KV bucket every kvelect election of a run shares.
const bucketName = "BENCH"

// kvelectSystem runs this library's elections on an embedded nats-server,
// in a memory-storage bucket whose TTL is the run's TTL.
type kvelectSystem struct {
	dir    string
	server *natsserver.Server
	ttl    time.Duration
}

func startKvelect(ttl time.Duration) (*kvelectSystem, error) {
	dir, err := os.MkdirTemp("", "kvelect-bench-nats-")
	if err != nil {
		return nil, err
	}
	s, err := embedded.Server(dir)
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	sys := &kvelectSystem{dir: dir, server: s, ttl: ttl}
	if err := sys.createBucket(); err != nil {
		sys.close()
		return nil, err
	}
	return sys, nil
}

func (s *kvelectSystem) createBucket() error {
	nc, err := nats.Connect(s.server.ClientURL())
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: bucketName, TTL: s.ttl, Storage: jetstream.MemoryStorage})
	if err != nil {
		return fmt.Errorf("creating bucket %s: %w", bucketName, err)
	}
	return nil
}

func (s *kvelectSystem) name() string { return "kvelect" }

func (s *kvelectSystem) serverAddr() string { return s.server.Addr().String() }

// renewalPeriod is the library's default campaign interval, 75% of the TTL.
func (s *kvelectSystem) renewalPeriod() time.Duration { return s.ttl * 3 / 4 }

func (s *kvelectSystem) close() {
	embedded.Shutdown(s.server)
	os.RemoveAll(s.dir)
}

func (s *kvelectSystem) newCandidate(addr, key string, id int, events chan<- event) (candidate, error) {
	nc, err := nats.Connect("nats://"+addr, nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		return nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	kv, err := js.KeyValue(ctx, bucketName)
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("binding bucket %s: %w", bucketName, err)
	}
	return &kvelectCandidate{nc: nc, kv: kv, key: key, id: id, events: events, done: make(chan struct{})}, nil
}

// kvelectCandidate is an election.Election on its own NATS connection.
type kvelectCandidate struct {
	nc     *nats.Conn
	kv     jetstream.KeyValue
	key    string
	id     int
	events chan<- event
	cancel context.CancelFunc
	done   chan struct{}

	mu       sync.Mutex
	election *election.Election
}

func (c *kvelectCandidate) report(kind eventKind, err error) {
	c.events <- event{kind: kind, id: c.id, at: time.Now(), err: err}
}

func (c *kvelectCandidate) campaign() {
	ctx, cancel := context.WithCancel(context.Background())
	c.cancel = cancel
	go func() {
		defer close(c.done)
		c.report(campaigning, nil)
		e, err := election.NewElection(ctx, fmt.Sprintf("c%d", c.id), c.key, c.kv,
			election.WithoutSplay(),
			election.OnWon(func() { c.report(won, nil) }),
			election.OnLost(func() { c.report(lost, nil) }),
		)
		if err != nil {
			c.report(failed, err)
			return
		}
		c.mu.Lock()
		c.election = e
		c.mu.Unlock()
		if err := e.Start(ctx); err != nil {
			c.report(failed, err)
		}
	}()
}

func (c *kvelectCandidate) current() *election.Election {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.election
}

func (c *kvelectCandidate) resign() {
	if e := c.current(); e != nil {
		e.Stop()
	}
}

// close closes the connection first, so that a leader cut off by its proxy
// fails its release at once instead of waiting for a reply.
func (c *kvelectCandidate) close() {
	c.nc.Close()
	if c.cancel != nil {
		c.cancel()
		<-c.done
	}
}
