package main

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"sync"
	"time"

	"github.com/kvelect/election/internal/embedded"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

// etcdReadyTimeout bounds how long the embedded etcd may take to start.
const etcdReadyTimeout = 30 * time.Second

// etcdSystem runs etcd's concurrency.Election on an embedded single-member
// etcd, with sessions whose lease TTL is the run's TTL in whole seconds.
type etcdSystem struct {
	dir    string
	server *embed.Etcd
	addr   string
	ttl    time.Duration
}

func startEtcd(ttl time.Duration) (*etcdSystem, error) {
	dir, err := os.MkdirTemp("", "kvelect-bench-etcd-")
	if err != nil {
		return nil, err
	}
	ports, err := embedded.FreePorts(2)
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	client := url.URL{Scheme: "http", Host: fmt.Sprintf("127.0.0.1:%d", ports[0])}
	peer := url.URL{Scheme: "http", Host: fmt.Sprintf("127.0.0.1:%d", ports[1])}
	cfg := embed.NewConfig()
	cfg.Dir = dir
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{client}, []url.URL{client}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{peer}, []url.URL{peer}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	// The kvelect bucket keeps its keys in memory; etcd has no memory mode,
	// so it skips fsync instead.
	cfg.UnsafeNoFsync = true
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("embedded etcd: %w", err)
	}
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		e.Close()
		os.RemoveAll(dir)
		return nil, fmt.Errorf("embedded etcd: %w", err)
	case <-time.After(etcdReadyTimeout):
		e.Close()
		os.RemoveAll(dir)
		return nil, fmt.Errorf("embedded etcd: not ready after %v", etcdReadyTimeout)
	}
	return &etcdSystem{dir: dir, server: e, addr: client.Host, ttl: ttl}, nil
}

func (s *etcdSystem) name() string { return "etcd" }

func (s *etcdSystem) serverAddr() string { return s.addr }

// renewalPeriod is how often etcd's client sends a lease keep-alive: a third
// of the TTL after the last response, checked on a 500 ms tick, so rounded
// up to the next half second (1 s at a 2 s TTL).
func (s *etcdSystem) renewalPeriod() time.Duration {
	const tick = 500 * time.Millisecond
	third := s.ttl / 3
	return (third + tick - 1) / tick * tick
}

func (s *etcdSystem) close() {
	s.server.Close()
	os.RemoveAll(s.dir)
}

func (s *etcdSystem) newCandidate(addr, election string, id int, events chan<- event) (candidate, error) {
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   []string{addr},
		DialTimeout: 10 * time.Second,
		Logger:      zap.NewNop(),
	})
	if err != nil {
		return nil, fmt.Errorf("etcd client: %w", err)
	}
	return &etcdCandidate{
		cli:    cli,
		ttl:    int(s.ttl / time.Second),
		prefix: "/bench/" + election,
		id:     id,
		events: events,
		done:   make(chan struct{}),
	}, nil
}

// etcdCandidate is a concurrency.Session and Election on its own client.
type etcdCandidate struct {
	cli    *clientv3.Client
	ttl    int
	prefix string
	id     int
	events chan<- event
	cancel context.CancelFunc
	done   chan struct{}

	mu       sync.Mutex
	session  *concurrency.Session
	election *concurrency.Election
	leading  bool
}

func (c *etcdCandidate) report(kind eventKind, err error) {
	c.events <- event{kind: kind, id: c.id, at: time.Now(), err: err}
}

func (c *etcdCandidate) campaign() {
	ctx, cancel := context.WithCancel(context.Background())
	c.cancel = cancel
	go func() {
		defer close(c.done)
		c.report(campaigning, nil)
		s, err := concurrency.NewSession(c.cli, concurrency.WithTTL(c.ttl), concurrency.WithContext(ctx))
		if err != nil {
			c.report(failed, err)
			return
		}
		e := concurrency.NewElection(s, c.prefix)
		c.mu.Lock()
		c.session, c.election = s, e
		c.mu.Unlock()
		if err := e.Campaign(ctx, fmt.Sprintf("c%d", c.id)); err != nil {
			if ctx.Err() == nil {
				c.report(failed, err)
			}
			return
		}
		c.mu.Lock()
		c.leading = true
		c.mu.Unlock()
		c.report(won, nil)
		// The session's Done is how an etcd leader learns that its lease may
		// have expired.
		select {
		case <-s.Done():
			c.report(lost, nil)
		case <-ctx.Done():
		}
	}()
}

func (c *etcdCandidate) resign() {
	c.mu.Lock()
	s, e := c.session, c.election
	c.mu.Unlock()
	if e == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	e.Resign(ctx)
	s.Close()
}

func (c *etcdCandidate) close() {
	if c.cancel != nil {
		c.cancel()
		<-c.done
	}
	c.cli.Close()
}
