package election

import (
	"context"
	"errors"
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
	tm := newTiming(2*time.Second, 0)
	e := &Election{name: "me", key: "k", timing: tm, clock: clk, state: LeaderState, token: 9, opts: options{priority: DefaultPriority}}
	e.validUntil = clk.Now().Add(tm.validity)
	c := &campaigner{Election: e}
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
