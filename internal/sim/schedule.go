package sim

import (
	"cmp"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	election "github.com/kvelect/election"
	"github.com/kvelect/election/fleet"
)

// Class is a class of fault.
type Class string

// The fault classes a schedule draws from.
const (
	Delete         Class = "delete"          // another client deletes a key
	Purge          Class = "purge"           // another client purges a key
	DeleteDraining Class = "delete-draining" // a key deleted or purged while its old leader's work drains
	LostAnswers    Class = "lost-answers"    // a candidate's writes applied but answered with a timeout
	LateAnswers    Class = "late-answers"    // a candidate's writes applied late (even after the caller timed out) or answered late
	LateWatch      Class = "late-watch"      // a candidate's watched entries arrive late
	Cut            Class = "cut"             // a candidate cut off both ways
	Suspend        Class = "suspend"         // a candidate's machine suspended: clock stopped, nothing sent
	Restart        Class = "restart"         // a candidate stopped (Stop) and started again
	// LateRenewal aims at the renewal window: a holder's next renewal is
	// applied and answered late, by a part of the time left before its
	// call's deadline, and the holder is cut off right after. Aimed at the
	// key's leader, or, after a removal while its work drains, at the
	// winner's renewal that confirms its claim before it announces: sent
	// with most of its validity ahead, that one can be answered later than
	// the key outlives it.
	LateRenewal Class = "late-renewal"
	// LostBeforeDone aims at Once's done mark: the next renewal of the Once
	// key's leader is applied but its answer lost, its job returns right
	// then, and the other candidates fire their Once jobs when the renewal
	// is about to age out.
	LostBeforeDone Class = "lost-before-done"
	// Drop: the server closes a candidate's connection; the client
	// reconnects after its reconnect wait, sending what it buffered.
	Drop Class = "drop"
	// DropAll: the server closes every connection at once, which is what
	// clients see of a server restart that keeps its store (memory storage
	// would lose it: see docs/simulation.md).
	DropAll Class = "drop-all"
	// Resign and Transfer are requests, not faults: a candidate asks the
	// leader of a Start key, through its Bucket, to stand down
	// (Bucket.Resign) or to hand the key to a candidate (Bucket.Transfer).
	Resign   Class = "resign"
	Transfer Class = "transfer"
)

// Classes lists every class, in the order summaries print them.
var Classes = []Class{Delete, Purge, DeleteDraining, LostAnswers, LateAnswers, LateWatch, Cut, Suspend, Restart, LateRenewal, LostBeforeDone, Drop, DropAll, Resign, Transfer}

// StopMode is how a leader's work stops once its leadership context is
// cancelled.
type StopMode int

const (
	StopAtOnce     StopMode = iota // returns at once
	StopAfterDelay                 // returns after a delay, never past its WorkDeadline
	StopAtDeadline                 // returns only at its WorkDeadline
)

func (m StopMode) String() string {
	return [...]string{"at once", "after delay", "at deadline"}[m]
}

// Work is what a candidate's OnWon does on one key.
type Work struct {
	Stop  StopMode
	Delay time.Duration // StopAfterDelay: how long, on the candidate's clock
}

// CandidateSpec describes one candidate.
type CandidateSpec struct {
	// Rate is how fast the candidate's clock runs against the server's: a
	// span it measures as d lasts d/Rate, within 1 ± ClockRate of d.
	Rate float64
	// Work is its OnWon work on each Start key.
	Work []Work
	// OnceEvery is how often it fires the Once job (0: never).
	OnceEvery time.Duration
	// Presence: its elections write candidate records (a quarter of the
	// candidates; the others run WithoutPresence). Records are most of a
	// run's writes (three per TTL per candidate and key, against one
	// renewal per interval per key), and so of its wall time.
	Presence bool
	// Bucket: its Start elections and each of its Once elections are made
	// from its Bucket, sharing the Bucket's watcher (half the candidates);
	// the others' elections each have a watcher of their own, as
	// NewElection makes them.
	Bucket bool
	// Link is the latency of its writes to the server (KV.latency adds up
	// to 100 µs to each).
	Link time.Duration
	// Reconnect is how long its client waits before it reconnects after its
	// connection dropped.
	Reconnect time.Duration
	// Priority is its elections' priority (WithPriority), 1–3, for a
	// candidate that writes records (priorities need them); 0 leaves the
	// default. PreferHigher makes its leaders hand the key to a listed
	// candidate of higher priority (WithPreferHigher).
	Priority     int
	PreferHigher bool
	// DaemonDelay, for a fleet's node, is how long its daemons take to
	// return once their context ends: none for half the nodes, up to
	// fleet.LossMargin for the others.
	DaemonDelay time.Duration
	// DoneFor, in a schedule with RunLog, is how long the done mark of its
	// successful Once runs lasts (election.DoneFor): shorter than the TTL
	// (the key is released, the mark is the log's alone) or longer (the
	// key is marked too).
	DoneFor time.Duration
}

// Fault is one fault of a schedule.
type Fault struct {
	At    time.Duration // from the start of the run
	Class Class
	Cand  int           // the candidate it hits (faults of one candidate)
	Key   int           // the key it hits (removals): Start keys first, then the Once key
	For   time.Duration // how long the window lasts (faults of one candidate)
	Purge bool          // DeleteDraining: purge rather than delete
	Leap  bool          // Suspend: the clock leaps by the suspension when it resumes
	Late  bool          // Cut: answers are late for the interval before the cut
	// LateRenewal: how late the answer is, as a part of the time left
	// before the call's deadline; and whether it aims at the confirming
	// renewal of a winner over a removal (else at the leader's).
	Frac    float64
	Removal bool
	To      int // Transfer: the candidate the key is handed to
}

func (f Fault) String() string {
	s := fmt.Sprintf("%9.3fs %-15s", f.At.Seconds(), f.Class)
	switch f.Class {
	case Delete, Purge:
		return s + fmt.Sprintf(" key %d", f.Key)
	case DeleteDraining:
		return s + fmt.Sprintf(" key %d purge=%v", f.Key, f.Purge)
	case Suspend:
		return s + fmt.Sprintf(" c%d for %v leap=%v", f.Cand, f.For, f.Leap)
	case Cut:
		return s + fmt.Sprintf(" c%d for %v late-before=%v", f.Cand, f.For, f.Late)
	case LateRenewal:
		return s + fmt.Sprintf(" key %d late by %.2f of the time left, then cut for %v, after a removal=%v", f.Key, f.Frac, f.For, f.Removal)
	case LostBeforeDone:
		return s + fmt.Sprintf(" others fire %v after", f.For)
	case Drop:
		return s + fmt.Sprintf(" c%d", f.Cand)
	case DropAll:
		return s
	case Resign:
		return s + fmt.Sprintf(" key %d, asked by c%d", f.Key, f.Cand)
	case Transfer:
		return s + fmt.Sprintf(" key %d to c%d, asked by c%d", f.Key, f.To, f.Cand)
	}
	return s + fmt.Sprintf(" c%d for %v", f.Cand, f.For)
}

// Schedule is everything a seed decides: the world and its faults.
type Schedule struct {
	Seed       uint64
	Length     time.Duration // faults come within it, the last ending Quiet before its end
	TTL        time.Duration // the TTL the candidates read
	ServerLead time.Duration // how much earlier than TTL the server ages keys out
	StartKeys  int           // keys elected with Start; one more key runs the Once jobs
	Candidates []CandidateSpec
	Faults     []Fault
	// RunLog: every Once job records its runs in the bucket's history
	// (election.RecordRuns), each candidate's with its DoneFor. Every Once
	// of a key must record its runs in one log for a mark there to bind
	// them all, so a seed has all its Once jobs record runs, or none.
	RunLog bool
	// Daemons is how many daemons the fleet runs (0: no fleet), which the
	// candidates with a Bucket join as nodes; their keys come after the
	// Once key, and removals aim at them too.
	Daemons int
	// Kept lists the faults kept of the seed's schedule, by their index in
	// it, when only some are (a shrunk schedule: Only); nil keeps all.
	Kept []int
	// breakCAS gives candidate 0 a store that breaks compare-and-set
	// (brokenCAS), for the test that the linearizability check fails on it.
	breakCAS bool
}

// DefaultLength is the simulated time of a seed unless said otherwise.
const DefaultLength = 10 * time.Minute

// BaseTTL is the TTL a seed's world is drawn for: every duration of a
// seed (fault windows and gaps, Once periods and jobs, reconnect waits,
// late answers) is drawn as for a TTL of BaseTTL and stretched by the
// seed's TTL over BaseTTL, so that a seed at any TTL tries the same phases
// of the renewal cycle; only link latencies stay as drawn.
const BaseTTL = 2 * time.Second

// MinTTL and MaxTTL bound the seeds' TTLs, drawn log-uniformly between
// them: as many seeds between 2 s and 5 s as between 12 s and 30 s.
const (
	MinTTL = BaseTTL
	MaxTTL = 30 * time.Second
)

// quiet is how long before the end of a run, in TTLs, the last fault ends:
// a key must have a leader again by then.
const quiet = 6

// Quiet is how long before the end of the run the last fault ends.
func (s Schedule) Quiet() time.Duration { return quiet * s.TTL }

// stretch is d, drawn for BaseTTL, stretched to the schedule's TTL (to
// the millisecond).
func (s Schedule) stretch(d time.Duration) time.Duration {
	return time.Duration(float64(d) * float64(s.TTL) / float64(BaseTTL)).Round(time.Millisecond)
}

// ms draws a duration between lo and hi milliseconds, as for BaseTTL,
// stretched to the schedule's TTL.
func (s Schedule) ms(rng *rand.Rand, lo, hi int) time.Duration {
	return s.stretch(ms(rng, lo, hi))
}

// NewSchedule draws the schedule of seed, for a run of length.
func NewSchedule(seed uint64, length time.Duration) Schedule {
	rng := rand.New(rand.NewPCG(seed, 0x51ed))
	ttl := time.Duration(float64(MinTTL) * math.Pow(float64(MaxTTL)/float64(MinTTL), rng.Float64())).Round(10 * time.Millisecond)
	s := Schedule{
		Seed:       seed,
		Length:     length,
		TTL:        ttl,
		ServerLead: min(election.ServerClockOffset, ttl/20),
		StartKeys:  1 + rng.IntN(2),
	}
	margin := election.TimingFor(ttl, 0).WorkMargin()
	for range 3 + rng.IntN(3) {
		c := CandidateSpec{Rate: rate(rng)}
		for range s.StartKeys {
			w := Work{Stop: StopMode(rng.IntN(3))}
			if w.Stop == StopAfterDelay {
				w.Delay = time.Duration(rng.Int64N(int64(margin)))
			}
			c.Work = append(c.Work, w)
		}
		if rng.IntN(4) != 0 {
			c.OnceEvery = s.ms(rng, 4000, 20000)
		}
		c.Presence = rng.IntN(4) == 0
		c.Bucket = rng.IntN(2) == 0
		c.Link = time.Duration(100+rng.IntN(900)) * time.Microsecond
		s.Candidates = append(s.Candidates, c)
	}
	suspends := 0
	if rng.IntN(3) == 0 {
		suspends = 1
	}
	n := len(s.Candidates)
	first, gap := s.stretch(3*time.Second), s.stretch(5*time.Second)
	for at := first; ; {
		at += s.ms(rng, 1000, 16000)
		f := Fault{At: at, Cand: rng.IntN(n), Key: rng.IntN(s.StartKeys + 1)}
		switch r := rng.IntN(100); {
		case r < 12:
			f.Class = Delete
		case r < 20:
			f.Class = Purge
		case r < 32:
			f.Class, f.Purge = DeleteDraining, rng.IntN(3) == 0
		case r < 42:
			f.Class, f.For = LostAnswers, s.ms(rng, 1000, 10000)
		case r < 52:
			f.Class, f.For = LateAnswers, s.ms(rng, 1000, 10000)
		case r < 61:
			f.Class, f.For = LateWatch, s.ms(rng, 1000, 10000)
		case r < 71:
			f.Class, f.For, f.Late = Cut, s.ms(rng, 500, 6000), rng.IntN(2) == 0
		case r < 80:
			f.Class, f.For = Restart, s.ms(rng, 100, 5000)
		case r < 90:
			f.Class, f.For, f.Frac, f.Removal = LateRenewal, s.ms(rng, 2000, 6000), 0.3+0.65*rng.Float64(), rng.IntN(3) != 0
			f.Purge = rng.IntN(3) == 0
		case r < 96:
			if !s.onces() {
				continue
			}
			f.Class, f.Key, f.For = LostBeforeDone, s.StartKeys, s.ms(rng, 1400, 1900)
		default:
			if suspends == 0 {
				continue
			}
			suspends--
			f.Class, f.For, f.Leap = Suspend, s.ms(rng, 1000, 10000), rng.IntN(2) == 0
		}
		if at+f.For+gap > length-s.Quiet() {
			break
		}
		s.Faults = append(s.Faults, f)
	}
	// Dropped connections come from a stream of their own, so that they
	// leave every other fault of a seed where it was.
	drops := rand.New(rand.NewPCG(seed, 0xd209))
	for i := range s.Candidates {
		s.Candidates[i].Reconnect = s.ms(drops, 100, 2000)
	}
	for at := first; ; {
		at += s.ms(drops, 10000, 50000)
		if at+gap > length-s.Quiet() {
			break
		}
		f := Fault{At: at, Class: Drop, Cand: drops.IntN(n)}
		if drops.IntN(5) == 0 {
			f.Class = DropAll
		}
		s.Faults = append(s.Faults, f)
	}
	// Priorities and requests to the leader come from a stream of their
	// own too. Only candidates that write records can have a priority or
	// be handed a key, and only one with a Bucket asks.
	reqs := rand.New(rand.NewPCG(seed, 0x7e9))
	var listed, asking []int
	for i := range s.Candidates {
		c := &s.Candidates[i]
		if c.Presence {
			c.Priority, c.PreferHigher = 1+reqs.IntN(3), reqs.IntN(2) == 0
			listed = append(listed, i)
		}
		if c.Bucket {
			asking = append(asking, i)
		}
	}
	for at := first; len(asking) > 0; {
		at += s.ms(reqs, 10000, 60000)
		if at+gap > length-s.Quiet() {
			break
		}
		f := Fault{At: at, Class: Resign, Cand: asking[reqs.IntN(len(asking))], Key: reqs.IntN(s.StartKeys)}
		if len(listed) > 0 && reqs.IntN(2) == 0 {
			f.Class, f.To = Transfer, listed[reqs.IntN(len(listed))]
		}
		s.Faults = append(s.Faults, f)
	}
	// Run logs come from a stream of their own too: in half the seeds with
	// Once jobs, the jobs record their runs, each candidate's with a mark
	// of its own length, half of them shorter than the TTL.
	logs := rand.New(rand.NewPCG(seed, 0x109))
	if s.onces() && logs.IntN(2) == 0 {
		s.RunLog = true
		for i := range s.Candidates {
			c := &s.Candidates[i]
			if c.OnceEvery == 0 {
				continue
			}
			if logs.IntN(2) == 0 {
				c.DoneFor = scale(logs, ttl, 0.25, 0.95)
			} else {
				c.DoneFor = scale(logs, ttl, 1, 10)
			}
		}
	}
	s.drawFleet(rand.New(rand.NewPCG(seed, 0xf1ee7)))
	slices.SortStableFunc(s.Faults, func(a, b Fault) int { return cmp.Compare(a.At, b.At) })
	return s
}

// drawFleet draws the fleet from a stream of its own, so that it leaves
// every other part of a seed as it was: in a quarter of the seeds with a
// candidate that has a Bucket, 1–2 daemons, each node's daemon delay, and
// every 10–40 s a removal of a daemon's key (a delete, a purge, or either
// while the daemon drains).
func (s *Schedule) drawFleet(rng *rand.Rand) {
	nodes := 0
	for _, c := range s.Candidates {
		if c.Bucket {
			nodes++
		}
	}
	if nodes == 0 || rng.IntN(4) != 0 {
		return
	}
	s.Daemons = 1 + rng.IntN(2)
	margin := fleet.LossMargin(s.TTL)
	for i := range s.Candidates {
		if c := &s.Candidates[i]; c.Bucket && rng.IntN(2) == 0 {
			c.DaemonDelay = time.Duration(rng.Int64N(int64(margin))).Round(time.Millisecond)
		}
	}
	first, gap := s.stretch(3*time.Second), s.stretch(5*time.Second)
	for at := first; ; {
		at += s.ms(rng, 10000, 40000)
		if at+gap > s.Length-s.Quiet() {
			break
		}
		f := Fault{At: at, Key: s.daemonKey(rng.IntN(s.Daemons))}
		switch rng.IntN(3) {
		case 0:
			f.Class = Delete
		case 1:
			f.Class = Purge
		default:
			f.Class, f.Purge = DeleteDraining, rng.IntN(3) == 0
		}
		s.Faults = append(s.Faults, f)
	}
}

// scale draws a duration between lo and hi times d, to the millisecond.
func scale(rng *rand.Rand, d time.Duration, lo, hi float64) time.Duration {
	return time.Duration(float64(d) * (lo + (hi-lo)*rng.Float64())).Round(time.Millisecond)
}

// onces reports whether some candidate runs Once jobs.
func (s Schedule) onces() bool {
	for _, c := range s.Candidates {
		if c.OnceEvery > 0 {
			return true
		}
	}
	return false
}

// rate draws a clock rate within the clock assumption, at its edges a
// third of the time each: a span measured as d lasts d·s on the server's
// clock, s in [1−ρ, 1+ρ].
func rate(rng *rand.Rand) float64 {
	var s float64
	switch rng.IntN(3) {
	case 0:
		s = 1 - election.ClockRate
	case 1:
		s = 1 + election.ClockRate
	default:
		s = 1 + election.ClockRate*(2*rng.Float64()-1)
	}
	return 1 / s
}

func ms(rng *rand.Rand, lo, hi int) time.Duration {
	return time.Duration(lo+rng.IntN(hi-lo)) * time.Millisecond
}

// String prints the schedule, one line per candidate and per fault.
func (s Schedule) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "seed %d: %v, TTL %v (server ages keys out %v early), %d Start keys and a Once key",
		s.Seed, s.Length, s.TTL, s.ServerLead, s.StartKeys)
	if s.RunLog {
		b.WriteString(", Once runs recorded in the bucket's history")
	}
	if s.Daemons > 0 {
		fmt.Fprintf(&b, ", a fleet of %d daemons (keys %d–%d)", s.Daemons, s.daemonKey(0), s.daemonKey(s.Daemons-1))
	}
	if s.Kept != nil {
		fmt.Fprintf(&b, ", only faults %s of the seed's", joinInts(s.Kept))
	}
	b.WriteString("\n")
	for i, c := range s.Candidates {
		fmt.Fprintf(&b, "  c%d clock ×%.4f, link %v, reconnects after %v", i, c.Rate, c.Link, c.Reconnect)
		for k, w := range c.Work {
			fmt.Fprintf(&b, ", key %d: stops %v", k, w.Stop)
			if w.Stop == StopAfterDelay {
				fmt.Fprintf(&b, " %v", w.Delay)
			}
		}
		if c.OnceEvery > 0 {
			fmt.Fprintf(&b, ", Once every %v", c.OnceEvery)
			if c.DoneFor > 0 {
				fmt.Fprintf(&b, " done for %v", c.DoneFor)
			}
		}
		if c.Presence {
			b.WriteString(", candidate records")
		}
		if c.Priority > 0 {
			fmt.Fprintf(&b, ", priority %d", c.Priority)
		}
		if c.PreferHigher {
			b.WriteString(" preferring higher")
		}
		if c.Bucket {
			b.WriteString(", elections from its Bucket")
			if s.Daemons > 0 {
				fmt.Fprintf(&b, ", a fleet node whose daemons return %v after their context ends", c.DaemonDelay)
			}
		}
		b.WriteString("\n")
	}
	for _, f := range s.Faults {
		fmt.Fprintf(&b, "  %v\n", f)
	}
	return b.String()
}

// Replay is the command that runs the schedule again.
func (s Schedule) Replay() string {
	cmd := fmt.Sprintf("go run ./cmd/chaos -simulate -seed %d", s.Seed)
	if s.Length != DefaultLength {
		cmd += fmt.Sprintf(" -length %v", s.Length)
	}
	if s.Kept != nil {
		cmd += " -keep " + joinInts(s.Kept)
		if len(s.Kept) == 0 {
			cmd += `""`
		}
	}
	return cmd
}

// Only returns the schedule with only the faults of the seed's schedule at
// the indices keep (in the order of the seed's schedule); s must be the
// seed's whole schedule.
func (s Schedule) Only(keep []int) Schedule {
	keep = append([]int{}, keep...) // not nil: Kept nil means every fault
	slices.Sort(keep)
	faults := make([]Fault, 0, len(keep))
	for _, i := range keep {
		if i >= 0 && i < len(s.Faults) {
			faults = append(faults, s.Faults[i])
		}
	}
	s.Faults, s.Kept = faults, keep
	return s
}

func joinInts(xs []int) string {
	var b strings.Builder
	for i, x := range xs {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprint(&b, x)
	}
	return b.String()
}
