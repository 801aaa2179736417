package election

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/kvelect/election/internal/testenv"
	"github.com/nats-io/nats.go/jetstream"
)

// skewedClock runs at rate times real time from the moment it was made,
// plus whatever jump added (a negative jump: a clock that stood still, as
// a suspended machine's does).
type skewedClock struct {
	origin time.Time
	rate   float64
	mu     sync.Mutex
	offset time.Duration
}

func newSkewedClock(rate float64) *skewedClock {
	return &skewedClock{origin: time.Now(), rate: rate}
}

func (c *skewedClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.origin.Add(time.Duration(float64(time.Since(c.origin))*c.rate) + c.offset)
}

func (c *skewedClock) Real(d time.Duration) time.Duration {
	return time.Duration(float64(d) / c.rate)
}

// jump moves the clock by d.
func (c *skewedClock) jump(d time.Duration) {
	c.mu.Lock()
	c.offset += d
	c.mu.Unlock()
}

// manualClock reads whatever the test set: the campaign's decisions read
// the time once each, so a test can put them at any moment.
type manualClock struct{ at time.Time }

func (c *manualClock) Now() time.Time                     { return c.at }
func (c *manualClock) Real(d time.Duration) time.Duration { return d }

// deciding returns a campaigner of key "k" at TTL 2 s and the default
// interval, on the manual clock clk, whose watcher has delivered entries (in
// order) at the clock's current time, with no other candidate listed.
func deciding(clk *manualClock, entries ...jetstream.KeyValueEntry) *campaigner {
	e := &Election{name: "me", key: "k", timing: defaultTiming(2 * time.Second), clock: clk, opts: options{priority: DefaultPriority}}
	h := newWatcher(nil, []string{"k"}, e.timing.ttl, clk, slog.New(slog.DiscardHandler))
	h.resync(map[string]jetstream.KeyValueEntry{}, 0)
	for _, en := range entries {
		h.apply(en)
	}
	c := &campaigner{e: e, watcher: h, since: clk.Now()}
	return c
}

// TestDecisionsFollowTheElectionsClock checks, with no server, when a
// candidate may claim the key and when its fallback timer fires, for each
// way the key can stand, on a clock the test moves.
func TestDecisionsFollowTheElectionsClock(t *testing.T) {
	t.Parallel()
	const put = jetstream.KeyValuePut
	t0 := time.Date(2026, 11, 27, 0, 0, 0, 0, time.UTC)
	tm := defaultTiming(2 * time.Second)
	tests := []struct {
		name      string
		entries   []jetstream.KeyValueEntry
		claimable time.Duration // after the entries arrived; -1: not free
		fallback  time.Duration // with no lost claim
	}{
		{"no entry", nil, 0, 0},
		{"held", []jetstream.KeyValueEntry{entry{1, put, "a"}}, -1, tm.ttl},
		{"released", []jetstream.KeyValueEntry{entry{1, put, "a"}, entry{2, put, "released:a"}}, 0, 0},
		{"handed to another", []jetstream.KeyValueEntry{entry{1, put, "a"}, entry{2, put, "handoff:b"}}, tm.sitOut, tm.sitOut},
		{"handed to this node", []jetstream.KeyValueEntry{entry{1, put, "a"}, entry{2, put, "handoff:me"}}, 0, 0},
		{"deleted: the vouch window", []jetstream.KeyValueEntry{entry{1, put, "a"}, entry{2, jetstream.KeyValueDelete, ""}}, tm.vouchFloor, tm.vouchFloor},
		{"draining for 1 s", []jetstream.KeyValueEntry{entry{1, put, "a"}, entry{2, jetstream.KeyValueDelete, ""}, entry{3, put, "draining:a for 1s"}}, outlast(time.Second), outlast(time.Second)},
		{"draining, unreadable", []jetstream.KeyValueEntry{entry{1, put, "a"}, entry{2, jetstream.KeyValueDelete, ""}, entry{3, put, "draining:a"}}, outlast(tm.hardEnd), outlast(tm.hardEnd)},
		{"done", []jetstream.KeyValueEntry{entry{1, put, "a"}, entry{2, put, "done:a"}}, -1, tm.ttl},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clk := &manualClock{at: t0}
			c := deciding(clk, tt.entries...)
			v := c.watcher.view(c.e.key)
			if tt.claimable < 0 {
				if v.free() {
					t.Errorf("free, want held")
				}
			} else {
				if got := c.claimableAt(&v).Sub(t0); got != tt.claimable && !(tt.claimable == 0 && got <= 0) {
					t.Errorf("claimable %v after the entry arrived, want %v", got, tt.claimable)
				}
				clk.at = t0.Add(tt.claimable - time.Nanosecond)
				if tt.claimable > 0 && c.canClaim(&v, 0, false) {
					t.Errorf("may claim %v after the entry arrived, before %v", tt.claimable-time.Nanosecond, tt.claimable)
				}
				clk.at = t0.Add(tt.claimable)
				if !c.canClaim(&v, 0, false) {
					t.Errorf("may not claim %v after the entry arrived", tt.claimable)
				}
			}
			clk.at = t0
			if got := c.fallbackAt(&v, 0).Sub(t0); got != tt.fallback && !(tt.fallback == 0 && got <= 0) {
				t.Errorf("fallback %v after the entry arrived, want %v", got, tt.fallback)
			}
		})
	}
}

// TestPatienceEndsWithTheWaitButNotForAKeyAboutToAgeOut checks Once's
// patience on the manual clock: a wait ends at its moment, stretched over
// the vouch window after a removal, and never for a holder silent for a TTL.
func TestPatienceEndsWithTheWaitButNotForAKeyAboutToAgeOut(t *testing.T) {
	t.Parallel()
	const put = jetstream.KeyValuePut
	t0 := time.Date(2026, 11, 27, 0, 0, 0, 0, time.UTC)
	tm := defaultTiming(2 * time.Second)
	clk := &manualClock{at: t0}
	held := deciding(clk, entry{1, put, "a"})
	v := held.watcher.view("k")
	if until, ok := held.patience(&v, t0.Add(time.Second)); !ok || !until.Equal(t0.Add(time.Second)) {
		t.Errorf("patience over a live holder: %v, %v; want the wait's end", until.Sub(t0), ok)
	}
	clk.at = t0.Add(tm.ttl)
	if _, ok := held.patience(&v, t0.Add(time.Second)); ok {
		t.Error("patience over a holder silent for a TTL: it ends, want none (the key is about to age out)")
	}
	clk.at = t0
	removed := deciding(clk, entry{1, put, "a"}, entry{2, jetstream.KeyValueDelete, ""})
	v = removed.watcher.view("k")
	if until, ok := removed.patience(&v, t0); !ok || !until.Equal(t0.Add(tm.vouchFloor)) {
		t.Errorf("patience of a wait of 0 over a removal: %v, %v; want the vouch window, %v", until.Sub(t0), ok, tm.vouchFloor)
	}
}

// TestIsLeaderEndsWhenTheClockPassesValidity moves a leader's clock, not
// real time: IsLeader, Token and WorkDeadline follow the election's clock.
func TestIsLeaderEndsWhenTheClockPassesValidity(t *testing.T) {
	t.Parallel()
	clk := newSkewedClock(1)
	e := &Election{timing: defaultTiming(2 * time.Second), clock: clk, state: LeaderState, token: 9}
	e.validUntil = clk.Now().Add(e.timing.validity)
	ctx := context.WithValue(context.Background(), leadershipKey{}, leadershipRef{token: 9, e: e})
	if !e.IsLeader() || e.Token() != 9 {
		t.Fatal("a leader within its validity: not leading")
	}
	if _, ok := WorkDeadline(ctx); !ok {
		t.Fatal("WorkDeadline within validity: not ok")
	}
	clk.jump(e.timing.validity)
	if e.IsLeader() || e.Token() != 0 || e.State() != CandidateState {
		t.Errorf("a leader whose clock passed its validity: IsLeader %v, Token %d, State %v", e.IsLeader(), e.Token(), e.State())
	}
	if _, ok := WorkDeadline(ctx); ok {
		t.Error("WorkDeadline past validity: ok")
	}
}

// slowLeaderRun leads with a candidate whose clock runs at rate against the
// server's, cuts it off, and returns how long after its leadership context
// was cancelled the other candidate's OnWon began (negative: before).
func slowLeaderRun(t *testing.T, bucket string, rate float64) time.Duration {
	s := testenv.Server(t)
	_, js := testenv.Connect(t, s.ClientURL())
	kv := testenv.Bucket(t, js, jetstream.KeyValueConfig{Bucket: bucket, TTL: 2 * time.Second})
	var mu sync.Mutex
	var lostAt, wonAt time.Time
	won := make(chan struct{})
	slow := &cutKV{KeyValue: kv}
	a, err := NewElection(context.Background(), "a", "k", slow, WithoutSplay(), WithClock(newSkewedClock(rate)),
		OnWon(func(leading context.Context) {
			close(won)
			<-leading.Done()
			mu.Lock()
			lostAt = time.Now()
			mu.Unlock()
		}))
	if err != nil {
		t.Fatal(err)
	}
	b, err := NewElection(context.Background(), "b", "k", kv, WithoutSplay(),
		OnWon(func() {
			mu.Lock()
			wonAt = time.Now()
			mu.Unlock()
		}))
	if err != nil {
		t.Fatal(err)
	}
	go a.Start(context.Background()) //nolint:errcheck // stopped below
	<-won
	go b.Start(context.Background()) //nolint:errcheck // stopped below
	defer b.Stop()
	defer a.Stop()
	slow.cut.Store(true)
	testenv.Eventually(t, "b to lead", 10*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return !wonAt.IsZero()
	})
	testenv.Eventually(t, "a's leadership to end", 10*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return !lostAt.IsZero()
	})
	mu.Lock()
	defer mu.Unlock()
	return wonAt.Sub(lostAt)
}

// TestALeaderWhoseClockRunsSlowStandsDownBeforeItsKeyAgesOut runs a leader
// whose clock runs slow by the clock assumption's bound (a span of it lasts
// 1 + ρ on the server's clock): cut off, it stands down before the key ages
// out and the other candidate leads. The same run with a clock far outside
// the bound (0.6) shows the overlap the bound rules out: the cut-off leader
// sees nothing of its successor.
func TestALeaderWhoseClockRunsSlowStandsDownBeforeItsKeyAgesOut(t *testing.T) {
	t.Parallel()
	t.Run("at the bound", func(t *testing.T) {
		t.Parallel()
		if gap := slowLeaderRun(t, "SLOW", 1/(1+ClockRate)); gap <= 0 {
			t.Errorf("b led %v before a's leadership context was cancelled", -gap)
		} else {
			t.Logf("b led %v after a's leadership context was cancelled", gap)
		}
	})
	t.Run("outside the bound", func(t *testing.T) {
		t.Parallel()
		if gap := slowLeaderRun(t, "SLOWER", 0.6); gap > 0 {
			t.Errorf("b led %v after a's leadership ended, with a's clock at 0.6: want an overlap, which the bound rules out", gap)
		} else {
			t.Logf("with a's clock at 0.6, b led %v before a's leadership context was cancelled", -gap)
		}
	})
}

// TestABucketsElectionsReadItsWatchersClock: WithClock given to OpenBucket
// reaches its watcher and every election made from it; given to one of its
// elections, whose views come from the shared watcher, it is refused.
func TestABucketsElectionsReadItsWatchersClock(t *testing.T) {
	t.Parallel()
	s := testenv.Server(t)
	_, js := testenv.Connect(t, s.ClientURL())
	kv := testenv.Bucket(t, js, jetstream.KeyValueConfig{Bucket: "CLOCKED", TTL: 2 * time.Second})
	clk := newSkewedClock(1 / (1 + ClockRate))
	b, err := OpenBucket(context.Background(), kv, WithClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	e, err := b.NewElection("a", "k")
	if err != nil {
		t.Fatal(err)
	}
	if e.clock != Clock(clk) || b.watcher.clock != Clock(clk) {
		t.Errorf("the election reads %T and the watcher %T, want both the bucket's clock", e.clock, b.watcher.clock)
	}
	if _, err := b.NewElection("b", "k", WithClock(newSkewedClock(1))); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("WithClock on a Bucket's election: %v, want ErrInvalidArgument", err)
	}
}

// TestSuspendedReadsTheLeadershipsClock: Suspended and SleptSince read the
// clock of the election whose leadership context they are given, so that a
// supervisor draining a leadership's work sees the sleeps its election
// sees (a test's clock here), and the machine's clock for any other
// context.
func TestSuspendedReadsTheLeadershipsClock(t *testing.T) {
	t.Parallel()
	clk := newSleepyClock(1)
	lead := context.WithValue(context.Background(), leadershipKey{}, leadershipRef{token: 1, e: &Election{clock: clk}})
	base := Suspended(lead)
	if SleptSince(lead, base) {
		t.Fatal("slept before the clock reported a sleep")
	}
	clk.sleep(5 * time.Second)
	if got := Suspended(lead) - base; got != 5*time.Second {
		t.Errorf("Suspended grew by %v after a 5 s sleep, want 5s", got)
	}
	if !SleptSince(lead, base) {
		t.Error("SleptSince false after a 5 s sleep")
	}
	if other := Suspended(context.Background()); other == Suspended(lead) {
		t.Errorf("Suspended of a plain context is %v, the leadership's clock's: it must read the machine's clock", other)
	}
}
