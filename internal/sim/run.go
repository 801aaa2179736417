// Package sim is a deterministic simulator of elections: each seed runs
// the real library against a real embedded nats-server inside a
// testing/synctest bubble, where time is fake and advances only when every
// goroutine of the bubble waits, so that ten simulated minutes of
// leadership, renewals and faults pass in a fraction of a second. A seed
// decides the world and its fault schedule; the run checks the election's
// promises (check.go). docs/simulation.md says what it covers and what it
// cannot.
package sim

import (
	"bufio"
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/nats-io/nats-server/v2/server/ats"
)

// Result is one seed's run.
type Result struct {
	Seed       uint64
	Schedule   Schedule
	Faults     map[Class]int // faults applied, by class
	Simulated  time.Duration
	Violations []Violation
	// Timeline is every decision of the run, in order of simulated time
	// (decisions at one instant in the order of their text): wins,
	// stand-downs, Once outcomes and the outcomes of requests to leaders.
	// A worker process sends its Digest alone.
	Timeline []Decision `json:",omitempty"`
	// Digest is a hash of the timeline, to compare two runs of one seed.
	Digest string
	// Decisions is how many decisions the timeline holds.
	Decisions int
	// Ops is how many writes reached the server, and CheckTook how long
	// the check of their history for linearizability took (wall time).
	Ops       int
	CheckTook time.Duration
}

// digest is a hash of timeline.
func digest(timeline []Decision) string {
	h := sha256.New()
	for _, d := range timeline {
		fmt.Fprintf(h, "%d %s\n", d.At, d.What)
	}
	return hex.EncodeToString(h.Sum(nil))[:16]
}

var registerATS sync.Once

// checkTimeout bounds the linearizability check of one seed's history; a
// check that runs out of time is a violation (inconclusive is no pass).
const checkTimeout = 20 * time.Second

// RunSeed runs the seed's schedule for length in a bubble of its own,
// under t, and returns what it found. It never fails t: violations are in
// the result.
func RunSeed(t *testing.T, seed uint64, length time.Duration) Result {
	return runSchedule(t, NewSchedule(seed, length))
}

// runSchedule runs schedule s in a bubble of its own, under t.
func runSchedule(t *testing.T, s Schedule) Result {
	// ats starts a goroutine on first use; started inside a bubble, it
	// would keep the bubble from ever idling, so time would never advance.
	registerATS.Do(func() { ats.Register() })
	// nats.go pools the timers of its Flush, which a client calls after it
	// reconnects: a timer made in one bubble and taken from the pool in
	// another stops the program. Two collections empty a sync.Pool.
	runtime.GC()
	runtime.GC()
	res := Result{Seed: s.Seed, Schedule: s}
	var hist *history
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		w, err := newWorld(res.Schedule, t.TempDir())
		if err != nil {
			res.Violations = []Violation{{Check: "setup", Detail: err.Error()}}
			return
		}
		w.run()
		res.Simulated = time.Since(start)
		res.Faults = w.faults
		w.hist.mu.Lock()
		ops := w.hist.ops
		w.hist.mu.Unlock()
		res.Violations = w.rec.finish(res.Simulated, res.Schedule.TTL-res.Schedule.ServerLead, w.keys[s.StartKeys], ops)
		hist = w.hist
		res.Timeline = w.rec.timeline
		slices.SortStableFunc(res.Timeline, func(a, b Decision) int {
			return cmp.Or(cmp.Compare(a.At, b.At), cmp.Compare(a.What, b.What))
		})
		res.Digest, res.Decisions = digest(res.Timeline), len(res.Timeline)
	})
	// Outside the bubble, where the check's timeout runs on real time.
	if hist != nil {
		wall := time.Now()
		for _, v := range hist.check(s.TTL-s.ServerLead, checkTimeout) {
			v.At = res.Simulated
			res.Violations = append(res.Violations, v)
		}
		res.Ops, res.CheckTook = len(hist.ops), time.Since(wall)
	}
	return res
}

// Config says which seeds to run.
type Config struct {
	First  uint64        // the first seed
	Seeds  int           // how many, from First
	Length time.Duration // simulated time of each
	// Parallel is how many seeds run at once. Above 1, each runs in a
	// process of its own that runs one seed at a time (see Worker), which
	// only the command can start; in one process seeds run one at a time.
	Parallel int
	Soak     time.Duration // if set, seeds from First on until this much wall time has passed (Seeds is ignored)
	// Keep, if not nil, keeps only these faults of each seed's schedule, by
	// index (Schedule.Only): a shrunk schedule's replay.
	Keep []int
	// Shrink: each failing seed's schedule is shrunk (Shrink) and the
	// smallest that fails is reported.
	Shrink bool
	// Timeline: a run of one seed prints its timeline of decisions (the
	// seed runs in this process).
	Timeline bool
}

// schedule is the schedule of seed under cfg.
func (cfg Config) schedule(seed uint64) Schedule {
	s := NewSchedule(seed, cfg.Length)
	if cfg.Keep != nil {
		s = s.Only(cfg.Keep)
	}
	return s
}

// Summary is what a set of runs found.
type Summary struct {
	Seeds          int     `json:"seeds"`
	FirstSeed      uint64  `json:"first_seed"`
	SimulatedHours float64 `json:"simulated_hours"`
	// TTLs is the simulated time in TTLs of each seed's bucket, summed:
	// about how many renewal cycles of each key the seeds ran.
	TTLs           float64       `json:"simulated_ttls"`
	Faults         map[Class]int `json:"faults"`
	Violations     int           `json:"violations"`
	Writes         int           `json:"writes_checked"` // writes whose history was checked for linearizability
	CheckSeconds   float64       `json:"history_check_seconds"`
	FailedSeeds    []uint64      `json:"failed_seeds"`
	WallSeconds    float64       `json:"wall_seconds"`
	SeedsPerMinute float64       `json:"seeds_per_wall_minute"`
	failed         []Result
	first          *Result // the first seed's result: a run of one seed prints it
}

func (sum *Summary) add(res Result) {
	sum.Seeds++
	if sum.first == nil {
		sum.first = &res
	}
	sum.SimulatedHours += res.Simulated.Hours()
	if res.Schedule.TTL > 0 {
		sum.TTLs += float64(res.Simulated) / float64(res.Schedule.TTL)
	}
	sum.Writes += res.Ops
	sum.CheckSeconds += res.CheckTook.Seconds()
	for c, n := range res.Faults {
		sum.Faults[c] += n
	}
	if len(res.Violations) > 0 {
		sum.Violations += len(res.Violations)
		sum.FailedSeeds = append(sum.FailedSeeds, res.Seed)
		sum.failed = append(sum.failed, res)
	}
}

// Run runs cfg's seeds under t and sums them up: Parallel at a time in
// worker processes, or one at a time in this one.
func Run(t *testing.T, cfg Config) Summary {
	wall := time.Now()
	sum := Summary{FirstSeed: cfg.First, Faults: map[Class]int{}}
	var mu sync.Mutex
	next := cfg.First
	end := cfg.First + uint64(cfg.Seeds)
	if cfg.Soak > 0 {
		end = ^uint64(0)
	}
	take := func() (uint64, bool) {
		mu.Lock()
		defer mu.Unlock()
		if next >= end || (cfg.Soak > 0 && time.Since(wall) >= cfg.Soak) {
			return 0, false
		}
		next++
		return next - 1, true
	}
	done := func(res Result) {
		mu.Lock()
		sum.add(res)
		mu.Unlock()
	}
	if cfg.Parallel > 1 && !cfg.Shrink && !cfg.Timeline {
		var wg sync.WaitGroup
		for range cfg.Parallel {
			wg.Go(func() { runWorker(t, cfg, take, done) })
		}
		wg.Wait()
	} else {
		for seed, ok := take(); ok; seed, ok = take() {
			var res Result
			s := cfg.schedule(seed)
			t.Run(fmt.Sprint(seed), func(t *testing.T) { res = runSchedule(t, s) })
			if cfg.Shrink && len(res.Violations) > 0 {
				_, res = Shrink(t, s, res, os.Stderr)
			}
			done(res)
		}
	}
	sum.WallSeconds = time.Since(wall).Seconds()
	sum.SeedsPerMinute = float64(sum.Seeds) / sum.WallSeconds * 60
	return sum
}

// seedTimeout bounds the wall time of one seed in a worker process. Time
// in a bubble advances only when every goroutine of it waits: a loop that
// never blocks (a controller that wakes itself at a moment already past)
// stops simulated time and would run forever.
const seedTimeout = 2 * time.Minute

// runWorker runs seeds from take in a worker process, this program run
// again with -worker, and hands each result to done. If the process dies,
// or runs a seed longer than seedTimeout and is killed, the seed it ran
// fails with a crash (its stderr says why), and another process takes
// over.
func runWorker(t *testing.T, cfg Config, take func() (uint64, bool), done func(Result)) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	args := []string{"-simulate", "-worker", "-length", cfg.Length.String()}
	if cfg.Keep != nil {
		args = append(args, "-keep", joinInts(cfg.Keep))
	}
	for {
		cmd := exec.Command(exe, args...)
		cmd.Stderr = os.Stderr
		in, err := cmd.StdinPipe()
		if err != nil {
			t.Fatal(err)
		}
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		results := json.NewDecoder(out)
		crashed := false
		for seed, ok := take(); ok; seed, ok = take() {
			var res Result
			var hung atomic.Bool
			watchdog := time.AfterFunc(seedTimeout, func() {
				hung.Store(true)
				_ = cmd.Process.Kill()
			})
			_, err := fmt.Fprintln(in, seed)
			if err == nil {
				err = results.Decode(&res)
			}
			watchdog.Stop()
			switch {
			case hung.Load():
				res = Result{Seed: seed, Schedule: cfg.schedule(seed), Violations: []Violation{{Check: "hang",
					Detail: fmt.Sprintf("the seed did not end within %v of wall time: some goroutine never waits, so simulated time stands still (-timeline runs it in one process; SIGQUIT prints the stacks)", seedTimeout)}}}
				crashed = true
			case err != nil:
				res = Result{Seed: seed, Schedule: cfg.schedule(seed), Violations: []Violation{{Check: "crash",
					Detail: fmt.Sprintf("the process running the seed died (%v); its output is above", err)}}}
				crashed = true
			}
			done(res)
			if crashed {
				break
			}
		}
		in.Close()
		_ = cmd.Wait()
		if !crashed {
			return
		}
	}
}

// Worker runs seeds as Run's worker process: each seed read from in (one
// per line) runs under t with cfg's length and options, and its result goes
// to out as one line of JSON, until in ends.
func Worker(t *testing.T, cfg Config, in io.Reader, out io.Writer) {
	lines := bufio.NewScanner(in)
	results := json.NewEncoder(out)
	for lines.Scan() {
		seed, err := strconv.ParseUint(lines.Text(), 10, 64)
		if err != nil {
			t.Fatalf("worker: %q is not a seed", lines.Text())
		}
		var res Result
		t.Run(fmt.Sprint(seed), func(t *testing.T) { res = runSchedule(t, cfg.schedule(seed)) })
		res.Timeline = nil // the digest says what the run decided
		if err := results.Encode(res); err != nil {
			t.Fatal(err)
		}
	}
}

// Report writes a failing seed's violations, the command that replays it
// and its schedule.
func Report(out io.Writer, res Result) {
	fmt.Fprintf(out, "seed %d: %d violations\n", res.Seed, len(res.Violations))
	for i, v := range res.Violations {
		if i == 20 {
			fmt.Fprintf(out, "  … and %d more\n", len(res.Violations)-i)
			break
		}
		fmt.Fprintf(out, "  %v\n", v)
	}
	fmt.Fprintf(out, "replay: %s\n", res.Schedule.Replay())
	fmt.Fprint(out, res.Schedule)
	fmt.Fprintf(out, "timeline: %d decisions, digest %s\n", res.Decisions, res.Digest)
}

// Print writes the summary as text: seeds, simulated hours, faults by
// class, violations, wall time, and each failing seed's report.
func (s Summary) Print(out io.Writer) {
	for _, res := range s.failed {
		Report(out, res)
	}
	if s.Seeds == 1 {
		// one seed: what it ran and decided, to compare with a replay
		if len(s.failed) == 0 {
			fmt.Fprint(out, s.first.Schedule)
		}
		if len(s.first.Timeline) > 0 {
			fmt.Fprintln(out, "timeline:")
		}
		for _, d := range s.first.Timeline {
			fmt.Fprintf(out, "  %v\n", d)
		}
		if len(s.failed) == 0 {
			fmt.Fprintf(out, "timeline: %d decisions, digest %s\n", s.first.Decisions, s.first.Digest)
		}
	}
	var faults []string
	for _, c := range Classes {
		faults = append(faults, fmt.Sprintf("%s %d", c, s.Faults[c]))
	}
	fmt.Fprintf(out, "simulation: %d seeds from %d, %.1f simulated hours (%.0f TTLs), %d violations", s.Seeds, s.FirstSeed, s.SimulatedHours, s.TTLs, s.Violations)
	if len(s.FailedSeeds) > 0 {
		fmt.Fprintf(out, " (seeds %v)", s.FailedSeeds)
	}
	fmt.Fprintf(out, "\n%d writes checked for linearizability (%.1f s)", s.Writes, s.CheckSeconds)
	fmt.Fprintf(out, "\nfaults: %s\nwall time %.1f s: %.0f seeds per wall minute\n", strings.Join(faults, ", "), s.WallSeconds, s.SeedsPerMinute)
}

// Main runs the simulator as a command (cmd/chaos -simulate) and exits: 0
// if every seed kept every check, 1 if one did not. synctest.Test needs a *testing.T, and the testing package
// makes one only for a test it runs, so Main runs the seeds as one test
// through testing.Main, the testing package's entry point for programs
// that run tests themselves. The testing package's own lines (PASS, FAIL)
// go to stderr; the summary, last, to stdout, with -json as one JSON
// object on its last line.
func Main(cfg Config, asJSON, worker bool) {
	// A seed's heap is small and short-lived; collecting it a quarter as
	// often saves a tenth of the CPU.
	debug.SetGCPercent(400)
	if worker {
		// Workers, as many as there are cores, each run on one: the
		// bubble's goroutines hand work to one another all the time, and
		// on one thread they do so without waking others (half again as
		// many seeds a minute as workers that use every core).
		runtime.GOMAXPROCS(1)
	}
	out := os.Stdout
	os.Stdout = os.Stderr
	simulate := func(t *testing.T) {
		if worker {
			Worker(t, cfg, os.Stdin, out)
			return
		}
		sum := Run(t, cfg)
		sum.Print(out)
		if asJSON {
			b, _ := json.Marshal(sum)
			fmt.Fprintln(out, string(b))
		}
		if sum.Violations > 0 {
			t.Fail()
		}
	}
	// testing.Main parses the command line unless something has; the
	// command's flags are not the testing package's, so it gets none.
	if !flag.Parsed() {
		_ = flag.CommandLine.Parse(nil)
	}
	testing.Main(func(string, string) (bool, error) { return true, nil }, []testing.InternalTest{{Name: "Simulate", F: simulate}}, nil, nil)
}

// Command runs the simulator with the command line args (cmd/chaos
// -simulate) and exits.
func Command(args []string) {
	fs := flag.NewFlagSet("chaos -simulate", flag.ExitOnError)
	fs.Bool("simulate", true, "run the simulator (this mode)")
	seeds := fs.Int("seeds", 0, "seeds to run (default 100, or 1 with -seed)")
	first := fs.Uint64("seed", 1, "the first seed")
	length := fs.Duration("length", DefaultLength, "simulated time of each seed")
	parallel := fs.Int("parallel", runtime.NumCPU(), "seeds run at once, each in a process of its own")
	asJSON := fs.Bool("json", false, "print the summary as one JSON object on the last line too")
	soak := fs.Duration("soak", 0, "run seeds from -seed on for this much wall time (a local soak; -seeds is ignored)")
	worker := fs.Bool("worker", false, "run as a worker process of -parallel: seeds from stdin, results as JSON lines to stdout")
	keep := fs.String("keep", "", "keep only these faults of each seed's schedule, by index, comma-separated (a shrunk schedule's replay)")
	shrink := fs.Bool("shrink", false, "shrink each failing seed's schedule to the fewest faults that still fail, one seed at a time")
	timeline := fs.Bool("timeline", false, "with one seed, print its timeline of decisions too")
	_ = fs.Parse(args)
	if fs.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "chaos -simulate: unexpected argument %q\n", fs.Arg(0))
		os.Exit(2)
	}
	if *seeds == 0 {
		*seeds = 100
		fs.Visit(func(f *flag.Flag) {
			if f.Name == "seed" {
				*seeds = 1
			}
		})
	}
	cfg := Config{First: *first, Seeds: *seeds, Length: *length, Parallel: *parallel, Soak: *soak, Shrink: *shrink, Timeline: *timeline}
	fs.Visit(func(f *flag.Flag) {
		if f.Name != "keep" {
			return
		}
		cfg.Keep = []int{}
		for x := range strings.SplitSeq(*keep, ",") {
			if x == "" {
				continue
			}
			i, err := strconv.Atoi(x)
			if err != nil || i < 0 {
				fmt.Fprintf(os.Stderr, "chaos -simulate: -keep %q: want fault indices, comma-separated\n", *keep)
				os.Exit(2)
			}
			cfg.Keep = append(cfg.Keep, i)
		}
	})
	Main(cfg, *asJSON, *worker)
}
