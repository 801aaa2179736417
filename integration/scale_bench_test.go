//go:build unix

package integration

import (
	"context"
	"flag"
	"runtime"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/kvelect/election"
	"github.com/kvelect/election/internal/testenv"
	"github.com/nats-io/nats.go/jetstream"
)

var (
	scaleKeys     = flag.Int("scale.keys", 10000, "BenchmarkScale: elections (keys) in the process")
	scaleTTL      = flag.Duration("scale.ttl", 10*time.Second, "BenchmarkScale: bucket TTL")
	scalePresence = flag.Bool("scale.presence", true, "BenchmarkScale: candidates write their records (false: WithoutPresence)")
	scaleWindow   = flag.Duration("scale.window", 0, "BenchmarkScale: steady-state window measured (0: three campaign intervals of the default 3/4 TTL)")
)

// BenchmarkScale runs -scale.keys elections with 3 candidates each in this
// process, all from one Bucket on one embedded server (memory storage), and
// reports: the time from Start to every key led, heap per election after
// that, CPU used in a steady-state window (client and the embedded server
// together, as a fraction of one core), KV writes per second, consumers on
// the bucket's stream, and leadership changes in the window (0 expected).
// Leaders that won together renew together, so the window is by default a
// whole number of campaign intervals: the figures then do not depend on
// where it falls between two rounds of renewals.
// It checks that every key has exactly one leader at the end. Run it once:
//
//	go test -run '^$' -bench Scale -benchtime 1x ./integration
func BenchmarkScale(b *testing.B) {
	window := *scaleWindow
	if window == 0 {
		window = 3 * *scaleTTL * 3 / 4
	}
	for b.Loop() {
		s := testenv.Server(b)
		_, js := testenv.Connect(b, s.ClientURL())
		kv := testenv.Bucket(b, js, jetstream.KeyValueConfig{Bucket: "SCALE", TTL: *scaleTTL, Storage: jetstream.MemoryStorage})
		heapBefore := heapInUse()

		start := time.Now()
		changes := &changeCounter{}
		opts := []election.Option{election.WithoutSplay(), election.OnWon(changes.add), election.OnLost(changes.add)}
		if !*scalePresence {
			opts = append(opts, election.WithoutPresence())
		}
		f := startFleet(b, kv, *scaleKeys, 3, opts...)
		f.awaitAllLed(b)
		allLed := time.Since(start)
		heapAfter := heapInUse()

		changes.reset()
		seqBefore := lastSeq(b, js)
		cpuBefore := cpuTime()
		time.Sleep(window) // the steady state is what is measured
		cpu := cpuTime() - cpuBefore
		writes := lastSeq(b, js) - seqBefore
		if n := f.count(b); n != 0 {
			b.Errorf("%d keys without a leader after the steady-state window", n)
		}

		b.ReportMetric(allLed.Seconds(), "s-to-all-led")
		b.ReportMetric(float64(heapAfter-heapBefore)/float64(*scaleKeys), "heap-B/election")
		b.ReportMetric(float64(runtime.NumGoroutine())/float64(*scaleKeys), "goroutines/election")
		b.ReportMetric(cpu.Seconds()/window.Seconds(), "cpu-cores")
		b.ReportMetric(float64(writes)/window.Seconds(), "writes/s")
		b.ReportMetric(float64(consumers(b, js, "SCALE")), "consumers")
		b.ReportMetric(float64(changes.get()), "changes-in-window")
		f.close()
	}
}

// changeCounter counts OnWon and OnLost calls.
type changeCounter struct{ n atomic.Int64 }

func (c *changeCounter) add()     { c.n.Add(1) }
func (c *changeCounter) reset()   { c.n.Store(0) }
func (c *changeCounter) get() int { return int(c.n.Load()) }

func heapInUse() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapInuse
}

func cpuTime() time.Duration {
	var u syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &u); err != nil {
		return 0
	}
	return time.Duration(u.Utime.Nano() + u.Stime.Nano())
}

func lastSeq(tb testing.TB, js jetstream.JetStream) uint64 {
	tb.Helper()
	stream, err := js.Stream(context.Background(), "KV_SCALE")
	if err != nil {
		tb.Fatal(err)
	}
	info, err := stream.Info(context.Background())
	if err != nil {
		tb.Fatal(err)
	}
	return info.State.LastSeq
}
