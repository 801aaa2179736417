package election

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// deadlines are the moments a user relies on, each counted on the leader's
// monotonic clock from the moment it sent its last acknowledged write,
// read through the code that gives them.
type deadlines struct {
	validity time.Duration // IsLeader turns false, the leadership context is cancelled, Once's done mark is confirmed by
	work     time.Duration // WorkDeadline: the guard kills the command; a fleet daemon has returned
	fleet    time.Duration // a fleet daemon's return after losing its node: validity + LossMargin (WorkMargin at the default interval)
	announce time.Duration // a winner over a removal announces this long after its claim's acknowledgement, on its own clock
	// drainWait is how long after seeing a draining mark that names left a
	// successor claims over it.
	drainWait func(left time.Duration) time.Duration
}

// readDeadlines reads the deadlines of an election with timing tm from the
// functions that give them to users.
func readDeadlines(t *testing.T, tm timing) deadlines {
	t.Helper()
	base := time.Now()
	c := &campaigner{e: &Election{timing: tm, clock: machineClock{}}}
	validUntil := c.deadline(&tenure{lastSent: base})
	e := &Election{timing: tm, clock: machineClock{}, state: LeaderState, validUntil: validUntil, token: 7}
	ctx := context.WithValue(context.Background(), leadershipKey{}, leadershipRef{token: 7, e: e})
	work, ok := WorkDeadline(ctx)
	if !ok {
		t.Fatalf("WorkDeadline of a leadership valid for %v: not ok", validUntil.Sub(base))
	}
	return deadlines{
		validity: validUntil.Sub(base),
		work:     work.Sub(base),
		fleet:    validUntil.Sub(base) + workMargin(tm),
		announce: tm.announceDelay,
		drainWait: func(left time.Duration) time.Duration {
			c := &campaigner{e: &Election{timing: tm, clock: machineClock{}}}
			mark := drainingValue("a", left)
			return c.drainedAt(&keyView{latest: entry{rev: 3, op: jetstream.KeyValuePut, value: mark}, seenAt: base}).Sub(base)
		},
	}
}

// workMargin is Timing.WorkMargin for the timing tm, which a mutated
// timing changes as the library's would.
func workMargin(tm timing) time.Duration { return tm.workDeadline - tm.validity }

// clocks is one case of the clock assumption: the leader's and the
// successor's clock rates, and the rate and offset of the server that ages
// the leader's write out, against real time. The server that stamped the
// write runs on real time.
type clocks struct {
	leader, successor float64 // clock seconds per real second
	server            float64
	offset            time.Duration // how far the expiring server's clock is ahead of the stamping server's
}

// clockCases returns every extreme of the assumption: rates such that any
// span differs by at most ρ between a candidate's clock and a server's, and
// server offsets within ServerClockOffset.
func clockCases(ttl time.Duration) []clocks {
	rho := ClockRate
	offset := min(ServerClockOffset, ttl/20)
	var cases []clocks
	for _, server := range []float64{1 - rho, 1, 1 + rho} {
		// A candidate's rate c against this server's: server/c within 1 ± ρ.
		for _, leader := range []float64{server / (1 + rho), server, server / (1 - rho)} {
			for _, successor := range []float64{server / (1 + rho), server / (1 - rho)} {
				for _, off := range []time.Duration{-offset, 0, offset} {
					cases = append(cases, clocks{leader: leader, successor: successor, server: server, offset: off})
				}
			}
		}
	}
	return cases
}

// violations checks the deadlines of timing tm against every clock case, in
// real seconds after the leader sent its last write (which the stamping
// server stamped at once: the earliest it can), and returns what breaks.
func violations(t *testing.T, tm timing) []string {
	d := readDeadlines(t, tm)
	real := func(clockSpan time.Duration, rate float64) float64 { return clockSpan.Seconds() / rate }
	var broken []string
	for _, c := range clockCases(tm.ttl) {
		// The expiring server removes the write once its clock reads the
		// stamp plus the TTL: its clock starts offset ahead and runs at
		// c.server.
		expiry := (tm.ttl - c.offset).Seconds() / c.server
		for _, x := range []struct {
			what string
			at   time.Duration
		}{{"validity (IsLeader, the leadership context, Once's mark)", d.validity}, {"WorkDeadline (the guard's kill)", d.work}, {"a fleet daemon's return", d.fleet}} {
			if at := real(x.at, c.leader); at >= expiry {
				broken = append(broken, fmt.Sprintf("%s %.3fs after the write, the key can age out at %.3fs (%+v)", x.what, at, expiry, c))
			}
		}
		// The guard's kill at the work deadline takes effect before the
		// key can age out: the last eighth of the margin the interval
		// leaves is the kill's.
		if left := expiry - real(d.work, c.leader); left < killSlack(tm).Seconds()*0.999 {
			broken = append(broken, fmt.Sprintf("WorkDeadline leaves the kill %.3fs before the key can age out, want %v (%+v)", left, killSlack(tm), c))
		}
		// A successor that claimed over a removal, acknowledged at the
		// earliest at the leader's write, announces after its delay on its
		// clock: after every deadline of the leader.
		end := real(max(d.validity, d.work, d.fleet), c.leader)
		if announce := real(d.announce, c.successor); announce < end {
			broken = append(broken, fmt.Sprintf("announce delay ends %.3fs after the leader's write, before its work deadline at %.3fs (%+v)", announce, end, c))
		}
		// A leader that saw its key removed writes a draining mark at any
		// moment of its validity, naming the time left to its work
		// deadline; a successor that saw the mark at the earliest (when it
		// was sent) claims over it once drainWait of that has passed, and
		// announces at once.
		for _, at := range []time.Duration{0, d.validity / 2, d.validity} {
			left := d.work - at
			if claim := real(at, c.leader) + real(d.drainWait(left), c.successor); claim < end {
				broken = append(broken, fmt.Sprintf("a successor claims over a draining mark written %v after the write %.3fs after it, before the leader's work deadline at %.3fs (%+v)", at, claim, end, c))
			}
		}
	}
	return broken
}

// timingCases covers the TTLs from MinTTL to MaxTTL, and the unsafe floor,
// each with the shortest, the default, a middling and the longest interval
// the limits allow.
func timingCases(t *testing.T) []timing {
	var out []timing
	for _, ttl := range []time.Duration{unsafeMinTTL, 500 * time.Millisecond, MinTTL, 2500 * time.Millisecond, 10 * time.Second, 30 * time.Second, time.Minute, 10 * time.Minute, MaxTTL} {
		unsafe := ttl < MinTTL
		shortest, gap := MinCampaignInterval, MinIntervalGap
		if unsafe {
			shortest, gap = unsafeMinCampaignInterval, unsafeMinIntervalGap
		}
		for _, interval := range []time.Duration{shortest, defaultInterval(ttl), ttl / 2, hardEnd(ttl) - gap} {
			if err := checkLimits(ttl, newTiming(ttl, interval).interval, unsafe); err != nil {
				t.Fatalf("TTL %v, interval %v: %v", ttl, interval, err)
			}
			out = append(out, newTiming(ttl, interval))
		}
	}
	return out
}

// TestDeadlinesComeBeforeTheEarliestExpiry checks every deadline a user
// relies on against the earliest moment a server can age the leader's
// write out, over TTLs, campaign intervals and clocks at the extremes of the
// clock assumption.
func TestDeadlinesComeBeforeTheEarliestExpiry(t *testing.T) {
	t.Parallel()
	for _, tm := range timingCases(t) {
		for _, v := range violations(t, tm) {
			t.Errorf("TTL %v, interval %v: %s", tm.ttl, tm.interval, v)
		}
	}
}

// TestDeadlineCheckCatchesEachDeadlineMovedPastTheBound shows the check
// above failing on timings mutated to break it: each deadline moved just
// past the earliest expiry, and the work deadline and fleet margin the
// library had before the clock assumption was stated (15/16 of the TTL, and
// the TTL's last eighth after validity).
func TestDeadlineCheckCatchesEachDeadlineMovedPastTheBound(t *testing.T) {
	t.Parallel()
	mutations := []struct {
		name   string
		mutate func(*timing)
		only   *timing // nil: every timing case; else only this one
	}{
		{name: "validity just past the earliest expiry", mutate: func(tm *timing) { tm.validity = tm.hardEnd + time.Millisecond }},
		{name: "work deadline just past the earliest expiry", mutate: func(tm *timing) { tm.workDeadline = tm.hardEnd + time.Millisecond }},
		{name: "work deadline at the earliest expiry, no time for the kill", mutate: func(tm *timing) { tm.workDeadline = tm.hardEnd }},
		{name: "fleet margin to the TTL", mutate: func(tm *timing) { tm.workDeadline = tm.ttl }},
		{name: "announce delay of the work deadline", mutate: func(tm *timing) { tm.announceDelay = tm.workDeadline }},
		{name: "a draining mark's time capped below what the work has left", mutate: func(tm *timing) { tm.hardEnd = tm.interval / 2 }},
		// The work deadline before the clock assumption was stated, at
		// the TTL floor with the default interval.
		{name: "work deadline at 15/16 of the TTL", mutate: func(tm *timing) { tm.workDeadline = tm.ttl * 15 / 16 }, only: ptr(defaultTiming(MinTTL))},
	}
	for _, m := range mutations {
		cases := timingCases(t)
		if m.only != nil {
			cases = []timing{*m.only}
		}
		caught := 0
		for _, tm := range cases {
			m.mutate(&tm)
			if len(violations(t, tm)) > 0 {
				caught++
			}
		}
		if caught != len(cases) {
			t.Errorf("%s: the check caught %d of %d timings, want all", m.name, caught, len(cases))
		}
	}
}

func ptr[T any](v T) *T { return &v }

// killSlack is the time the work deadline leaves a kill to take effect
// before the earliest expiry: an eighth of the margin the interval leaves.
func killSlack(tm timing) time.Duration { return (tm.hardEnd - tm.interval) / 8 }

// TestDefaultTimings pins the figures the docs give for the default
// interval.
func TestDefaultTimings(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		ttl                               time.Duration
		hardEnd, validity, work, announce string
	}{
		{MinTTL, "1.81s", "1.655s", "1.771s", "2s"},
		{10 * time.Second, "9.429s", "8.464s", "9.187s", "10.421s"},
		{time.Minute, "57.048s", "51.024s", "55.542s", "1m3.053s"},
	} {
		tm := defaultTiming(tt.ttl)
		got := []string{fmtMS(tm.hardEnd), fmtMS(tm.validity), fmtMS(tm.workDeadline), fmtMS(tm.announceDelay)}
		want := []string{tt.hardEnd, tt.validity, tt.work, tt.announce}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("TTL %v: hard end, validity, work deadline, announce delay = %v, want %v", tt.ttl, got, want)
		}
	}
}

func fmtMS(d time.Duration) string { return d.Round(time.Millisecond).String() }

// TestDesignDocGivesTheCodesTiming checks docs/design.md's Clocks section
// against the code: the bounds it states and each deadline of its table,
// at TTLs of 2 s, 10 s and a minute.
func TestDesignDocGivesTheCodesTiming(t *testing.T) {
	t.Parallel()
	text, err := os.ReadFile("docs/design.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(text)
	for _, want := range []string{
		fmt.Sprintf("**ρ = %d%%**", int(ClockRate*100)),
		fmt.Sprintf("**δ = %d ms**", ServerClockOffset.Milliseconds()),
	} {
		if !strings.Contains(doc, want) {
			t.Errorf("docs/design.md does not state %q", want)
		}
	}
	cell := func(d time.Duration, digits int) string {
		return strconv.FormatFloat(d.Seconds(), 'f', digits, 64) + " s"
	}
	rows := map[string]func(Timing) time.Duration{
		"| earliest expiry `E` |": func(t Timing) time.Duration { return t.EarliestExpiry },
		"| validity `V` |":        func(t Timing) time.Duration { return t.Validity },
		"| work deadline `W` |":   func(t Timing) time.Duration { return t.WorkDeadline },
		"| announce delay `D` |":  func(t Timing) time.Duration { return t.AnnounceDelay },
	}
	for prefix, of := range rows {
		i := strings.Index(doc, prefix)
		if i < 0 {
			t.Errorf("docs/design.md has no row %q", prefix)
			continue
		}
		line := doc[i : i+strings.Index(doc[i:], "\n")]
		for _, c := range []struct {
			ttl    time.Duration
			digits int
		}{{2 * time.Second, 3}, {10 * time.Second, 3}, {time.Minute, 2}} {
			if want := cell(of(TimingFor(c.ttl, 0)), c.digits); !strings.Contains(line, "| "+want+" |") {
				t.Errorf("docs/design.md's row %s lacks %s at TTL %v: %s", prefix, want, c.ttl, line)
			}
		}
	}
}
