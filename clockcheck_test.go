package election

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// sleepyClock is the machine's clock, run at rate, that stands still while
// frozen, as a suspended machine's monotonic clock does, and reports the
// time it stood still as slept (SuspendReporter) once it resumes; sleep
// reports a suspend that is over at once.
type sleepyClock struct {
	rate     float64
	origin   time.Time
	mu       sync.Mutex
	offset   time.Duration // real time the clock did not count
	frozenAt time.Time     // zero: running
	slept    time.Duration
}

func newSleepyClock(rate float64) *sleepyClock {
	return &sleepyClock{rate: rate, origin: time.Now()}
}

func (c *sleepyClock) readLocked(real time.Time) time.Time {
	return c.origin.Add(time.Duration(float64(real.Sub(c.origin)-c.offset) * c.rate))
}

func (c *sleepyClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.frozenAt.IsZero() {
		return c.readLocked(c.frozenAt)
	}
	return c.readLocked(time.Now())
}

func (c *sleepyClock) Real(d time.Duration) time.Duration { return time.Duration(float64(d) / c.rate) }

func (c *sleepyClock) Suspended() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.slept
}

// freeze suspends the machine: the clock stands still until resume.
func (c *sleepyClock) freeze() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.frozenAt = time.Now()
}

// resume ends the suspend: the clock runs on from where it stood, and
// reports the time it stood still as slept.
func (c *sleepyClock) resume() {
	c.mu.Lock()
	defer c.mu.Unlock()
	d := time.Since(c.frozenAt)
	c.offset += d
	c.slept += time.Duration(float64(d) * c.rate)
	c.frozenAt = time.Time{}
}

// sleep reports a suspend of d that just ended: the clock missed d.
func (c *sleepyClock) sleep(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.slept += d
}

// TestSleptSinceIgnoresOnlyNoise: the suspend rule counts any sleep longer
// than the reading's noise, and only what the clock reports after base.
func TestSleptSinceIgnoresOnlyNoise(t *testing.T) {
	t.Parallel()
	clk := newSleepyClock(1)
	if sleptSince(clk, 0) {
		t.Error("slept with nothing reported")
	}
	clk.sleep(suspendNoise / 2)
	if sleptSince(clk, 0) {
		t.Errorf("slept after a report of %v, no more than the noise", suspendNoise/2)
	}
	clk.sleep(suspendNoise)
	if !sleptSince(clk, 0) {
		t.Errorf("not slept after a report of %v", clk.Suspended())
	}
	if sleptSince(clk, clk.Suspended()) {
		t.Error("slept since the latest report")
	}
	if sleptSince(newSkewedClock(1), 0) {
		t.Error("a clock that cannot report a suspend reports one")
	}
}

// TestASleepVoidsEveryDecisionThatTrustsTheLease puts a leader's decisions
// on a clock that reports a suspend, with no server: after the machine
// slept, however little of the validity the clock counted, IsLeader,
// Token, State and WorkDeadline say it does not lead, CheckHealth counts
// the sleep as passed, and the campaigner may neither extend its validity,
// adopt a lost renewal nor vouch.
func TestASleepVoidsEveryDecisionThatTrustsTheLease(t *testing.T) {
	t.Parallel()
	clk := newSleepyClock(1)
	tm := defaultTiming(2 * time.Second)
	e := &Election{name: "me", key: "k", timing: tm, clock: clk, state: LeaderState, token: 9, opts: options{priority: DefaultPriority}}
	e.validUntil = clk.Now().Add(tm.validity)
	c := &campaigner{e: e}
	lead := &leadership{}
	tn := &tenure{token: 9, revision: 9, lastSent: clk.Now(), lead: lead, announced: true, unsure: true}
	ctx := context.WithValue(context.Background(), leadershipKey{}, leadershipRef{token: 9, e: e})
	mine := entry{10, jetstream.KeyValuePut, "me"}

	check := func(when string, want bool) {
		t.Helper()
		if got := e.IsLeader(); got != want {
			t.Errorf("%s: IsLeader %v, want %v", when, got, want)
		}
		if got := e.Token() != 0; got != want {
			t.Errorf("%s: Token %d", when, e.Token())
		}
		if got := e.State() == LeaderState; got != want {
			t.Errorf("%s: State %v", when, e.State())
		}
		if _, ok := WorkDeadline(ctx); ok != want {
			t.Errorf("%s: WorkDeadline ok %v, want %v", when, ok, want)
		}
		if got := c.valid(tn); got != want {
			t.Errorf("%s: valid %v, want %v", when, got, want)
		}
		if got := c.lostRenewal(tn, mine); got != want {
			t.Errorf("%s: may adopt a lost renewal: %v, want %v", when, got, want)
		}
		if got := c.mayVouch(tn); got != want {
			t.Errorf("%s: may vouch: %v, want %v", when, got, want)
		}
	}
	check("awake", true)
	if err := e.CheckHealth(0); err != nil {
		t.Errorf("awake: %v", err)
	}
	clk.sleep(10 * time.Millisecond)
	check("after a sleep of 10 ms", false)
	if err := e.CheckHealth(0); err != nil {
		t.Errorf("after a sleep of 10 ms, well within the validity: %v", err)
	}
	clk.sleep(5 * time.Second)
	if err := e.CheckHealth(time.Second); !errors.Is(err, ErrUnhealthy) {
		t.Errorf("after a sleep of 5 s past a validity of %v: CheckHealth %v, want ErrUnhealthy", tm.validity, err)
	}
	// A renewal sent after the sleep counts from what the clock reported
	// then.
	tn.slept, e.validSlept = clk.Suspended(), clk.Suspended()
	check("after a renewal sent since", true)
}

// sample is a clock sample at local times sent and sent+rtt, stamped at
// the fraction at of the round trip on a server clock running at rate
// against the local one, from stamp0, plus jump.
func sample(t0 time.Time, sent, rtt time.Duration, at, rate float64, jump time.Duration) clockSample {
	mid := sent + time.Duration(at*float64(rtt))
	return clockSample{
		sent:  t0.Add(sent),
		recv:  t0.Add(sent + rtt),
		stamp: t0.Add(time.Duration(float64(mid)*rate) + jump),
	}
}

// writes returns the samples of an election at TTL 2 s writing every
// 400 ms for span, with round trips between maxRTT/2 and maxRTT, each
// stamped anywhere within it (drawn by rng), on a server clock at rate.
func writes(rng *rand.Rand, span, maxRTT time.Duration, rate float64) []clockSample {
	t0 := time.Date(2026, 11, 27, 0, 0, 0, 0, time.UTC)
	var out []clockSample
	for at := time.Duration(0); at <= span; at += 400 * time.Millisecond {
		rtt := maxRTT/2 + time.Duration(rng.Int64N(int64(maxRTT/2)+1))
		out = append(out, sample(t0, at, rtt, rng.Float64(), rate, 0))
	}
	return out
}

// TestTheRateIsMeasuredWithinRoundTripBounds: an election's writes on
// server clocks at several rates, with round trips of 20 to 40 ms, each
// stamped anywhere within its round trip (drawn at random, 200 times
// each): the measured bounds always hold the true rate, a rate within
// half of ClockRate is never warned of, one beyond ClockRate by a fifth
// of it is always refused, and one at ClockRate exactly, which the
// assumption allows, never is. Nothing is measured before 5 TTLs, and no
// jump is ever reported.
func TestTheRateIsMeasuredWithinRoundTripBounds(t *testing.T) {
	t.Parallel()
	const ttl = 2 * time.Second
	tests := []struct {
		rate         float64
		warn, refuse bool
	}{
		{1, false, false},
		{1 + 0.4*ClockRate, false, false},
		{1 - 0.4*ClockRate, false, false},
		{1 + 0.7*ClockRate, true, false},
		{1 - 0.7*ClockRate, true, false},
		{1 + ClockRate, true, false},
		{1 - ClockRate, true, false},
		{1 + 1.2*ClockRate, true, true},
		{1 - 1.2*ClockRate, true, true},
	}
	for _, tt := range tests {
		rng := rand.New(rand.NewPCG(uint64(tt.rate*1e6), 1))
		for range 200 {
			if early := measure(writes(rng, rateMinSpanTTLs*ttl-ttl, 40*time.Millisecond, tt.rate), ttl); early.rate.Span != 0 {
				t.Fatalf("rate %v: measured over %v, less than %d TTLs", tt.rate, early.rate.Span, rateMinSpanTTLs)
			}
			samples := writes(rng, 8*ttl, 40*time.Millisecond, tt.rate)
			found := measure(samples, ttl)
			r := found.rate
			switch {
			case r.Span == 0:
				t.Fatalf("rate %v: nothing measured over 8 TTLs", tt.rate)
			case len(found.jumps) > 0:
				t.Fatalf("rate %v: jumps reported with none made: %+v", tt.rate, found.jumps)
			case r.RateLow > tt.rate || r.RateHigh < tt.rate:
				t.Fatalf("rate %v: measured %v in [%v, %v], which misses it", tt.rate, r.Rate, r.RateLow, r.RateHigh)
			case r.Beyond(ClockRate/2) != tt.warn:
				t.Fatalf("rate %v, measured %v in [%v, %v]: warned %v, want %v", tt.rate, r.Rate, r.RateLow, r.RateHigh, !tt.warn, tt.warn)
			case r.Beyond(ClockRate) != tt.refuse:
				t.Fatalf("rate %v, measured %v in [%v, %v]: refused %v, want %v", tt.rate, r.Rate, r.RateLow, r.RateHigh, !tt.refuse, tt.refuse)
			}
		}
	}
}

// TestAJumpIsReportedOnceAndLeftOutOfTheRate: the stamps jump by 300 ms
// (a new stream leader that far ahead) between two writes with round
// trips of 20 to 40 ms: the jump is reported once, within its error of
// 300 ms, and the rate measured across it is the clocks' own.
func TestAJumpIsReportedOnceAndLeftOutOfTheRate(t *testing.T) {
	t.Parallel()
	const ttl = 2 * time.Second
	rng := rand.New(rand.NewPCG(7, 7))
	for _, jump := range []time.Duration{300 * time.Millisecond, -300 * time.Millisecond, 5 * time.Second} {
		samples := writes(rng, 12*ttl, 40*time.Millisecond, 1)
		for i := len(samples) / 2; i < len(samples); i++ {
			samples[i].stamp = samples[i].stamp.Add(jump)
		}
		found := measure(samples, ttl)
		if len(found.jumps) != 1 {
			t.Fatalf("jump %v: %d jumps reported, want 1: %+v", jump, len(found.jumps), found.jumps)
		}
		j := found.jumps[0]
		if (j.Jump-jump).Abs() > j.JumpError || j.JumpError > 100*time.Millisecond {
			t.Errorf("jump %v reported as %v ± %v", jump, j.Jump, j.JumpError)
		}
		t.Logf("jump %v reported as %v ± %v", jump, j.Jump.Round(time.Millisecond), j.JumpError.Round(time.Millisecond))
		if again := measure(samples, ttl); len(again.jumps) != 0 {
			t.Errorf("jump %v reported again: %+v", jump, again.jumps)
		}
		if r := found.rate; r.Span == 0 || r.RateLow > 1 || r.RateHigh < 1 || r.Beyond(ClockRate/2) {
			t.Errorf("jump %v: rate measured %v in [%v, %v] over %v, want 1", jump, r.Rate, r.RateLow, r.RateHigh, r.Span)
		}
	}
}

// TestASleepBetweenWritesIsNeitherAJumpNorARate: the machine slept 30 s
// while a write was on its way (its clock stood still, the server's did
// not): no jump is reported and the rate is measured around it.
func TestASleepBetweenWritesIsNeitherAJumpNorARate(t *testing.T) {
	t.Parallel()
	const ttl = 2 * time.Second
	samples := writes(rand.New(rand.NewPCG(3, 3)), 12*ttl, 10*time.Millisecond, 1)
	for i := len(samples)/2 - 1; i < len(samples); i++ {
		samples[i].stamp = samples[i].stamp.Add(30 * time.Second)
		samples[i].slept, samples[i].sleptAfter = 30*time.Second, 30*time.Second
	}
	samples[len(samples)/2-1].slept = 0 // the machine slept while this write was on its way
	found := measure(samples, ttl)
	if len(found.jumps) != 0 {
		t.Errorf("a sleep reported as jumps: %+v", found.jumps)
	}
	if r := found.rate; r.Span == 0 || math.Abs(r.Rate-1) > 0.01 {
		t.Errorf("rate measured %v over %v, want 1", r.Rate, r.Span)
	}
}

// TestRefusalNamesTheMeasuredRate: the refusal's message gives the rate and
// its bounds.
func TestRefusalNamesTheMeasuredRate(t *testing.T) {
	t.Parallel()
	r := ClockCheck{Rate: 1.0612, RateLow: 1.0601, RateHigh: 1.0623, Span: 12 * time.Second}
	err := r.rateError()
	if !errors.Is(err, ErrClockRate) {
		t.Fatalf("rateError %v, want ErrClockRate", err)
	}
	for _, want := range []string{"6.12% slow", "1.0612", "1.0601", "1.0623", "refusing to lead"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%q does not name %q", err, want)
		}
	}
	if err := (ClockCheck{Rate: 1.01, RateLow: 1.005, RateHigh: 1.015, Span: time.Minute}).rateError(); err != nil {
		t.Errorf("a rate of 1.01: %v, want none", err)
	}
}
