//go:build unix

package harness

import (
	"context"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	"github.com/kvelect/election/cmd/chaos/record"
	"github.com/kvelect/election/internal/faultproxy"
)

// comboFault is one fault a combination may start: it runs for d once
// started, and returns when healed.
type comboFault struct {
	name    string
	cluster bool // only on a cluster
	run     func(ctx context.Context, h *Harness, l *Worker, d time.Duration) error
}

// comboFaults are the faults combinations draw from: on the leader, a
// candidate, the key and the servers.
var comboFaults = []comboFault{
	{name: "pause-leader", run: func(_ context.Context, h *Harness, l *Worker, d time.Duration) error {
		h.Pause(l, d)
		return nil
	}},
	{name: "pause-candidate", run: func(_ context.Context, h *Harness, l *Worker, d time.Duration) error {
		if c := h.Candidate(l); c != nil {
			h.Pause(c, d)
		}
		return nil
	}},
	{name: "blackhole-leader", run: func(_ context.Context, h *Harness, l *Worker, d time.Duration) error {
		proxies(l, (*faultproxy.Proxy).Blackhole)
		time.Sleep(d)
		proxies(l, (*faultproxy.Proxy).Heal)
		return nil
	}},
	{name: "delay-leader", run: func(_ context.Context, h *Harness, l *Worker, d time.Duration) error {
		proxies(l, func(p *faultproxy.Proxy) { p.Delay(d / 2) })
		time.Sleep(d)
		proxies(l, (*faultproxy.Proxy).Heal)
		return nil
	}},
	{name: "delete-key", run: func(ctx context.Context, h *Harness, l *Worker, _ time.Duration) error {
		return h.kv.Delete(ctx, h.FaultKey(l))
	}},
	{name: "pause-stream-leader", cluster: true, run: func(ctx context.Context, h *Harness, _ *Worker, d time.Duration) error {
		return h.PauseServer(ctx, d, (*Harness).StreamLeader)
	}},
	{name: "pause-follower", cluster: true, run: func(ctx context.Context, h *Harness, _ *Worker, d time.Duration) error {
		return h.PauseServer(ctx, d, (*Harness).StreamFollower)
	}},
}

// proxies applies fault to each of w's proxies.
func proxies(w *Worker, fault func(*faultproxy.Proxy)) {
	for _, p := range w.proxies {
		fault(p)
	}
}

// Combo injects two or three faults of comboFaults at once, drawn with the
// run's seeded generator: each starts within a TTL of the others and lasts
// 0.3 to 2 TTLs. The faults drawn are recorded with the fault, so that a
// seed replays the same draws.
func (h *Harness) Combo(ctx context.Context, l *Worker, ttl time.Duration) error {
	var pool []comboFault
	for _, f := range comboFaults {
		if !f.cluster || h.cfg.Cluster {
			pool = append(pool, f)
		}
	}
	h.rngMu.Lock()
	h.rng.Shuffle(len(pool), func(i, j int) { pool[i], pool[j] = pool[j], pool[i] })
	drawn := pool[:2+h.rng.IntN(2)]
	starts, lengths := make([]time.Duration, len(drawn)), make([]time.Duration, len(drawn))
	for i := range drawn {
		starts[i] = time.Duration(h.rng.Int64N(int64(ttl)))
		lengths[i] = time.Duration(float64(ttl) * (0.3 + 1.7*h.rng.Float64()))
	}
	h.rngMu.Unlock()
	var names []string
	for _, f := range drawn {
		names = append(names, f.name)
	}
	h.rec.Record(record.Event{Kind: "combo", Cause: strings.Join(names, "+")})
	var wg sync.WaitGroup
	errs := make(chan error, len(drawn))
	for i, f := range drawn {
		wg.Go(func() {
			time.Sleep(starts[i])
			errs <- f.run(ctx, h, l, lengths[i])
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// newRand returns the run's generator for seed.
func newRand(seed uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)) }
