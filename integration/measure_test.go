package integration

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kvelect/election"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// renewRecord records every election's acknowledged writes that events report,
// by candidate name, for tests to await them and to know when a leader's
// validity started.
type renewRecord struct {
	mu      sync.Mutex
	byName  map[string][]renewAt
	changed chan struct{}
}

// renewAt is an acknowledged renewal: sent at sent, acknowledged at acked.
type renewAt struct {
	sent, acked time.Time
}

func newRenewRecord() *renewRecord {
	return &renewRecord{byName: map[string][]renewAt{}, changed: make(chan struct{})}
}

// hook is the option that feeds the record.
func (r *renewRecord) hook() election.Option {
	return election.WithEventHook(func(e election.Event) {
		if e.Kind != election.EventRenewed || e.Err != nil {
			return
		}
		now := time.Now()
		r.mu.Lock()
		defer r.mu.Unlock()
		r.byName[e.Name] = append(r.byName[e.Name], renewAt{sent: now.Add(-e.Duration), acked: now})
		close(r.changed)
		r.changed = make(chan struct{})
	})
}

// await returns the first renewal by name acknowledged after after.
func (r *renewRecord) await(t *testing.T, name string, after time.Time) renewAt {
	t.Helper()
	timeout := time.After(awaitTimeout)
	for {
		r.mu.Lock()
		changed := r.changed
		for _, rn := range r.byName[name] {
			if rn.acked.After(after) {
				r.mu.Unlock()
				return rn
			}
		}
		r.mu.Unlock()
		select {
		case <-changed:
		case <-timeout:
			t.Fatalf("no renewal by %s after %v within %v", name, after.Format(time.StampMilli), awaitTimeout)
		}
	}
}

// since returns name's first renewal acknowledged after after, without
// waiting for one.
func (r *renewRecord) since(name string, after time.Time) (renewAt, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, rn := range r.byName[name] {
		if rn.acked.After(after) {
			return rn, true
		}
	}
	return renewAt{}, false
}

// last returns name's latest acknowledged renewal sent before before.
func (r *renewRecord) last(name string, before time.Time) (renewAt, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var last renewAt
	found := false
	for _, rn := range r.byName[name] {
		if rn.sent.Before(before) {
			last, found = rn, true
		}
	}
	return last, found
}

// rtts returns the round trips of name's renewals.
func (r *renewRecord) rtts(name string) []time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	var d []time.Duration
	for _, rn := range r.byName[name] {
		d = append(d, rn.acked.Sub(rn.sent))
	}
	return d
}

// probe writes one key of a bucket at a steady pace, each write with a
// timeout, and keeps how each ended: what a region's clients see of a
// fault.
type probe struct {
	mu      sync.Mutex
	results []probeResult
	cancel  context.CancelFunc
	done    chan struct{}
}

type probeResult struct {
	at    time.Time // when the write was sent
	took  time.Duration
	class string
}

// startProbe puts key through kv every period, each with timeout, until
// stop.
func startProbe(kv jetstream.KeyValue, key string, period, timeout time.Duration) *probe {
	ctx, cancel := context.WithCancel(context.Background())
	p := &probe{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(p.done)
		tick := time.NewTicker(period)
		defer tick.Stop()
		for {
			start := time.Now()
			wctx, wcancel := context.WithTimeout(ctx, timeout)
			_, err := kv.Put(wctx, key, []byte(start.Format(time.RFC3339Nano)))
			wcancel()
			if ctx.Err() != nil {
				return
			}
			p.mu.Lock()
			p.results = append(p.results, probeResult{at: start, took: time.Since(start), class: errClass(err)})
			p.mu.Unlock()
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	return p
}

// stop ends the probe and returns its results.
func (p *probe) stop() []probeResult {
	p.cancel()
	<-p.done
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.results)
}

// first returns the first result since since of class, and whether there is one.
func (p *probe) first(class string, since time.Time) (probeResult, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, r := range p.results {
		if r.class == class && !r.at.Before(since) {
			return r, true
		}
	}
	return probeResult{}, false
}

// errClass names how a KV call ended, the way docs/topologies.md groups
// failures.
func errClass(err error) string {
	switch {
	case err == nil:
		return "ok"
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, nats.ErrTimeout):
		return "timeout"
	case errors.Is(err, nats.ErrNoResponders), errors.Is(err, jetstream.ErrNoStreamResponse):
		return "no responders"
	default:
		var apiErr *jetstream.APIError
		if errors.As(err, &apiErr) {
			return fmt.Sprintf("error %d", apiErr.ErrorCode)
		}
		return err.Error()
	}
}

// runs summarises the probe results sent from since until until as runs of
// one class: "ok ×4 (1.0s), timeout ×3 (6.0s)", each with the time from its
// first write to the next run's.
func runs(results []probeResult, since, until time.Time) string {
	var parts []string
	var class string
	var count int
	var start time.Time
	flush := func(end time.Time) {
		if count > 0 {
			parts = append(parts, fmt.Sprintf("%s ×%d (%v)", class, count, end.Sub(start).Round(100*time.Millisecond)))
		}
	}
	var last time.Time
	for _, r := range results {
		if r.at.Before(since) || !r.at.Before(until) {
			continue
		}
		if r.class != class {
			flush(r.at)
			class, count, start = r.class, 0, r.at
		}
		count++
		last = r.at.Add(r.took)
	}
	flush(last)
	if len(parts) == 0 {
		return "no writes"
	}
	return strings.Join(parts, ", ")
}

// percentiles returns the median and the 99th percentile of d.
func percentiles(d []time.Duration) (p50, p99 time.Duration) {
	if len(d) == 0 {
		return 0, 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	return s[len(s)/2], s[(len(s)*99+99)/100-1]
}

// ms formats d in milliseconds with one decimal.
func ms(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d)/float64(time.Millisecond)) }

// watchResume writes key from writer every few milliseconds from now on,
// and returns how long w, a watcher of key in another region, took to
// deliver a value written after now: how long after a heal a watcher
// resumes.
func watchResume(t *testing.T, writer jetstream.KeyValue, w jetstream.KeyWatcher, key string) time.Duration {
	t.Helper()
	start := time.Now()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	wg.Go(func() {
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for i := 0; ; i++ {
			wctx, wcancel := context.WithTimeout(ctx, time.Second)
			_, _ = writer.Put(wctx, key, fmt.Appendf(nil, "after %d", i))
			wcancel()
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	})
	awaitUpdate(t, w, "a value written after the heal", func(e jetstream.KeyValueEntry) bool {
		return strings.HasPrefix(string(e.Value()), "after ")
	})
	return time.Since(start)
}

// drain returns the group's events not yet returned by await, without
// waiting for more.
func (g *group) drain() []event {
	evs := g.pending
	g.pending = nil
	for {
		select {
		case ev := <-g.events:
			evs = append(evs, ev)
		default:
			return evs
		}
	}
}

// watchKey starts a watcher of key through kv, for updates only.
func watchKey(t *testing.T, kv jetstream.KeyValue, key string) jetstream.KeyWatcher {
	t.Helper()
	// The watcher lives as long as the context it was made with.
	w, err := kv.Watch(context.Background(), key, jetstream.UpdatesOnly())
	if err != nil {
		t.Fatalf("watching %s: %v", key, err)
	}
	t.Cleanup(func() { w.Stop() })
	return w
}

// validity is how long after sending its last acknowledged write a leader
// stands down, at the default campaign interval.
func validity(ttl time.Duration) time.Duration { return election.TimingFor(ttl, 0).Validity }

// holdCut keeps a fault in place until it has lasted at least d since
// start: the full forms hold cuts long enough for pings to notice them. It
// waits out a fault's length, not an event.
func holdCut(start time.Time, d time.Duration) {
	if wait := time.Until(start.Add(d)); wait > 0 {
		time.Sleep(wait)
	}
}

// renewRTTs times n revision-checked updates of a key of its own through
// each kv, the operation a renewal is, all regions at once.
func renewRTTs(t *testing.T, kvs map[string]jetstream.KeyValue, n int) map[string][]time.Duration {
	t.Helper()
	var mu sync.Mutex
	out := map[string][]time.Duration{}
	var wg sync.WaitGroup
	for region, kv := range kvs {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), awaitTimeout)
			defer cancel()
			key := "rtt-" + strings.ReplaceAll(region, " ", "-")
			rev, err := kv.Put(ctx, key, []byte("0"))
			if err != nil {
				t.Errorf("%s: %v", region, err)
				return
			}
			var d []time.Duration
			for i := range n {
				start := time.Now()
				rev, err = kv.Update(ctx, key, fmt.Appendf(nil, "%d", i), rev)
				if err != nil {
					t.Errorf("%s: update %d: %v", region, i, err)
					return
				}
				d = append(d, time.Since(start))
			}
			mu.Lock()
			out[region] = d
			mu.Unlock()
		})
	}
	wg.Wait()
	return out
}

// watchLatencies writes n values of key through writer, 20 ms apart, and
// returns, for each watcher, how long after each write was sent it
// delivered it. A watcher may skip a value replaced before the server sent
// it (the bucket keeps one per key), so each watcher is read until it
// delivers the last value.
func watchLatencies(t *testing.T, writer jetstream.KeyValue, watchers map[string]jetstream.KeyValue, key string, n int) map[string][]time.Duration {
	t.Helper()
	type arrival struct {
		i  int
		at time.Time
	}
	arrivals := map[string][]arrival{}
	var wg sync.WaitGroup
	var mu sync.Mutex
	for region, kv := range watchers {
		w := watchKey(t, kv, key)
		wg.Go(func() {
			timeout := time.After(awaitTimeout)
			for {
				select {
				case e := <-w.Updates():
					at := time.Now()
					var i int
					if _, err := fmt.Sscanf(string(e.Value()), "%d", &i); err != nil || i < 0 || i >= n {
						t.Errorf("%s's watcher delivered %q", region, e.Value())
						return
					}
					mu.Lock()
					arrivals[region] = append(arrivals[region], arrival{i, at})
					mu.Unlock()
					if i == n-1 {
						return
					}
				case <-timeout:
					mu.Lock()
					got := len(arrivals[region])
					mu.Unlock()
					t.Errorf("%s's watcher delivered %d of %d writes, not the last, within %v", region, got, n, awaitTimeout)
					return
				}
			}
		})
	}
	sent := make([]time.Time, n)
	for i := range n {
		sent[i] = time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, err := writer.Put(ctx, key, fmt.Appendf(nil, "%d", i))
		cancel()
		if err != nil {
			t.Errorf("writing %s: %v", key, err)
			break
		}
		time.Sleep(20 * time.Millisecond) // paces the writes; waits for nothing
	}
	wg.Wait()
	out := map[string][]time.Duration{}
	for region, as := range arrivals {
		for _, a := range as {
			out[region] = append(out[region], a.at.Sub(sent[a.i]))
		}
	}
	return out
}
