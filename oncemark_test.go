package election

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"
)

// simClock runs at rate times a simulated real time the test moves, from
// the moment it was made.
type simClock struct {
	origin time.Time
	real   *time.Time
	rate   float64
}

func (c simClock) Now() time.Time {
	return c.origin.Add(time.Duration(float64(c.real.Sub(c.origin)) * c.rate))
}

func (c simClock) Real(d time.Duration) time.Duration { return time.Duration(float64(d) / c.rate) }

// TestDoneMarkEndsOnlyOnceItsTimeHasPassedOnItsServer judges a run log's
// done mark as Once does, on a candidate whose clock runs at 1 − ρ, 1 and
// 1 + ρ times real time, from readings of the servers' clock by a server
// up to ServerClockOffset ahead of or behind the one that stored the mark,
// taken up to a minute before the judgement. The mark is never judged
// ended before DoneFor has passed by the storing server's clock (here, real
// time); and a reading taken 2·ServerClockOffset after that, judged at
// once, finds it ended.
func TestDoneMarkEndsOnlyOnceItsTimeHasPassedOnItsServer(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 11, 27, 3, 0, 0, 0, time.UTC)
	const doneFor = 10 * time.Minute
	mark := Run{Seq: 7, Stored: t0, Name: "a", Token: 3, Ended: true, DoneFor: doneFor}
	end := t0.Add(doneFor) // by the storing server's clock, which is real time here
	for _, rate := range []float64{1 - ClockRate, 1, 1 + ClockRate} {
		for _, offset := range []time.Duration{-ServerClockOffset, 0, ServerClockOffset} {
			t.Run(fmt.Sprintf("rate %v offset %v", rate, offset), func(t *testing.T) {
				t.Parallel()
				real := t0
				c := &campaigner{e: &Election{name: "b", key: "k", clock: simClock{origin: t0, real: &real, rate: rate}, log: slog.New(slog.DiscardHandler)}}
				for read := end.Add(-2 * time.Minute); read.Before(end.Add(3 * ServerClockOffset)); read = read.Add(10 * time.Millisecond) {
					real = read
					reading, received := read.Add(offset), c.e.now()
					for _, later := range []time.Duration{0, time.Second, time.Minute} {
						real = read.Add(later)
						if !c.markStands(mark, reading, received) && real.Before(end) {
							t.Fatalf("read at %v, judged %v later: the mark ended %v before its DoneFor passed on its server",
								read.Sub(t0), later, end.Sub(real))
						}
					}
					real = read
					if !read.Before(end.Add(2*ServerClockOffset)) && c.markStands(mark, reading, received) {
						t.Fatalf("read at %v, %v after the mark's DoneFor passed on its server: judged standing", read.Sub(t0), read.Sub(end))
					}
				}
			})
		}
	}
	if (Run{Seq: 7, Stored: t0, Ended: true}).standsAt(t0) || (Run{Stored: t0, DoneFor: time.Hour}).standsAt(t0) {
		t.Error("a record without a mark, or no record at all, stands")
	}
}

// TestOnceOptionsCheck: DoneFor needs a run log that keeps records longer.
func TestOnceOptionsCheck(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		o  onceOptions
		ok bool
	}{
		{onceOptions{}, true},
		{onceOptions{noRetry: true}, true},
		{onceOptions{doneFor: -time.Second, log: keeps(time.Hour)}, false},
		{onceOptions{doneFor: time.Hour}, false},
		{onceOptions{doneFor: time.Hour, log: keeps(0)}, true},
		{onceOptions{doneFor: time.Hour, log: keeps(time.Hour)}, false},
		{onceOptions{doneFor: time.Hour - 2*ServerClockOffset, log: keeps(time.Hour)}, true},
	} {
		if err := tc.o.check(); (err == nil) != tc.ok {
			t.Errorf("%+v: %v, want ok %v", tc.o, err, tc.ok)
		}
	}
}

// keeps is a run log that keeps records for d.
type keeps time.Duration

func (keeps) LastRun(context.Context, string) (Run, time.Time, error)        { return Run{}, time.Time{}, nil }
func (keeps) AppendRun(context.Context, string, Run, uint64) (uint64, error) { return 1, nil }
func (k keeps) Retention() time.Duration                                     { return time.Duration(k) }
