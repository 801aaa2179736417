//go:build unix

package check

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kvelect/election/cmd/chaos/record"
)

const sec = int64(time.Second)

// writeRun writes synthetic histories for check.
func writeRun(t *testing.T, files map[string][]record.Event) string {
	t.Helper()
	dir := t.TempDir()
	for name, events := range files {
		f, err := os.Create(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		enc := json.NewEncoder(f)
		for _, ev := range events {
			if err := enc.Encode(ev); err != nil {
				t.Fatal(err)
			}
		}
		f.Close()
	}
	return dir
}

// leaderTerm is a worker that wins with token at won (after a Create sent at
// sent), renews at each of renewals, and records its stand-down at lost,
// where its work returns too.
func leaderTerm(token uint64, sent, won int64, renewals []int64, lost int64) []record.Event {
	events := []record.Event{
		{T: sent + 1e6, Kind: "op", Op: "create", Sent: sent, Outcome: "ok", Rev: token},
		{T: won, Kind: "won", Token: token},
	}
	for i, r := range renewals {
		events = append(events, record.Event{T: r + 1e6, Kind: "op", Op: "update", Sent: r, Outcome: "ok", Rev: token + uint64(i) + 1})
	}
	return append(events, record.Event{T: lost, Kind: "lost", Token: token}, record.Event{T: lost, Kind: "returned", Token: token})
}

// slowStop is leaderTerm whose work returns only at returned, after the
// stand-down.
func slowStop(token uint64, sent, won int64, renewals []int64, lost, returned int64) []record.Event {
	events := leaderTerm(token, sent, won, renewals, lost)
	events[len(events)-1].T = returned
	return events
}

func baseRun(workers map[string][]record.Event, harness ...record.Event) map[string][]record.Event {
	files := map[string][]record.Event{
		"harness.jsonl": append([]record.Event{{T: 0, Kind: "cold-start"}}, append(harness, record.Event{T: 20 * sec, Kind: "end"})...),
		"audit.jsonl":   nil,
		"fence.jsonl":   nil,
	}
	for w, events := range workers {
		for i := range events {
			events[i].Worker = w
		}
		files["worker-"+w+".jsonl"] = events
		for _, ev := range events {
			if ev.Kind == "won" {
				files["audit.jsonl"] = append(files["audit.jsonl"], record.Event{Kind: "audit", Rev: ev.Token, Op: "PUT", Worker: w})
			}
		}
	}
	return files
}

var ttl2s = Params{TTL: 2 * time.Second, Workers: 2, Rounds: 1}

func TestCheckCountsOverlapUntilTheValidityDeadline(t *testing.T) {
	// w0 (validity 1.75 s from its write at 0) records its stand-down only at
	// 5 s; w1 announces at 3 s. IsLeader overlapped nowhere, the raw belief
	// for 2 s.
	dir := writeRun(t, baseRun(map[string][]record.Event{
		"w0": leaderTerm(1, 0, sec/2, nil, 5*sec),
		"w1": leaderTerm(3, 2*sec, 3*sec, []int64{3 * sec, 4 * sec}, 5700e6),
	}))
	rep, err := Dir(dir, ttl2s)
	if err != nil {
		t.Fatal(err)
	}
	if rep.SplitBrainMS != 0 || rep.SplitBrainRawMS != 2000 {
		t.Errorf("split brain %v ms, raw %v ms; want 0 and 2000", rep.SplitBrainMS, rep.SplitBrainRawMS)
	}
	if rep.DemotionViolations != 1 {
		t.Errorf("self-demotion violations %d, want 1 (w0 stood down 5 s after its last write)", rep.DemotionViolations)
	}
}

func TestCheckFindsSplitBrainAndSubtractsPauses(t *testing.T) {
	// w0 renews every 1.5 s and leads from 1 s to 10 s, paused from 5 s to
	// 5.5 s; w1 announces at 4 s and leads until 8 s. Overlap: 4–5 s and
	// 5.5–8 s.
	dir := writeRun(t, baseRun(map[string][]record.Event{
		"w0": leaderTerm(1, 0, sec, []int64{1500e6, 3000e6, 4500e6, 6000e6, 7500e6, 9000e6}, 10*sec),
		"w1": leaderTerm(5, 2*sec, 4*sec, []int64{3500e6, 5000e6, 6500e6}, 8*sec),
	}, record.Event{T: 5 * sec, Kind: "pause", Target: "w0"}, record.Event{T: 5500e6, Kind: "resume", Target: "w0"}))
	rep, err := Dir(dir, ttl2s)
	if err != nil {
		t.Fatal(err)
	}
	if rep.SplitBrainMS != 3500 || rep.SplitBrainEpisodes != 2 {
		t.Errorf("split brain %v ms in %d episodes, want 3500 in 2", rep.SplitBrainMS, rep.SplitBrainEpisodes)
	}
	if rep.SplitBrainRawMS != 4000 {
		t.Errorf("raw split brain %v ms, want 4000", rep.SplitBrainRawMS)
	}
	if rep.OK() {
		t.Error("report is ok despite split brain")
	}
}

func TestCheckFindsASuccessorWinningBeforeTheOldWorkReturned(t *testing.T) {
	// The key of w0 (last renewal sent at 1.5 s) is deleted at 2 s: w0
	// stands down at once, its work takes 500 ms to stop. w1 wins at 2.3 s,
	// before w0's work returned: no two IsLeader at once, but two works.
	keyDelete := record.Event{T: 2 * sec, Kind: "fault", Scenario: "key-delete", Target: "w0"}
	dir := writeRun(t, baseRun(map[string][]record.Event{
		"w0": slowStop(1, 0, sec, []int64{1500e6}, 2*sec+10e6, 2500e6),
		"w1": leaderTerm(4, 2200e6, 2300e6, []int64{3800e6}, 5*sec),
	}, keyDelete))
	rep, err := Dir(dir, ttl2s)
	if err != nil {
		t.Fatal(err)
	}
	if rep.SplitBrainMS != 0 {
		t.Errorf("split brain %v ms, want 0: w0 stood down before w1 won", rep.SplitBrainMS)
	}
	if rep.WorkOverlaps != 1 || rep.WorkOverlapMS != 200 || rep.OK() {
		t.Errorf("work overlaps %d for %v ms, ok %v; want 1 for 200 ms, not ok", rep.WorkOverlaps, rep.WorkOverlapMS, rep.OK())
	}
	if h := rep.Scenarios[0].HandoverMS; h.N != 1 || h.Max != -200 {
		t.Errorf("handover from the work's return %+v, want one of -200 ms", h)
	}

	// w1 wins 100 ms after w0's work returned.
	dir = writeRun(t, baseRun(map[string][]record.Event{
		"w0": slowStop(1, 0, sec, []int64{1500e6}, 2*sec+10e6, 2500e6),
		"w1": leaderTerm(4, 2550e6, 2600e6, []int64{3800e6}, 5*sec),
	}, keyDelete))
	if rep, err = Dir(dir, ttl2s); err != nil {
		t.Fatal(err)
	}
	if rep.WorkOverlaps != 0 {
		t.Errorf("work overlaps %d, want 0: %v", rep.WorkOverlaps, rep.Problems)
	}
	if s := rep.Scenarios[0]; s.FailoverMS.Max != 600 || s.HandoverMS.N != 1 || s.HandoverMS.Max != 100 {
		t.Errorf("failover %+v, handover %+v; want 600 ms and one of 100 ms", s.FailoverMS, s.HandoverMS)
	}
}

func TestCheckEndsTheWorkOfAKilledOrSuspendedWorker(t *testing.T) {
	// w0, killed at 2 s, never returned: its work ends at its death, before
	// w1 wins at 3.5 s.
	w0 := slowStop(1, 0, sec, []int64{1500e6}, 0, 0)
	w0 = w0[:len(w0)-2]
	dir := writeRun(t, baseRun(map[string][]record.Event{
		"w0": w0,
		"w1": leaderTerm(4, 3400e6, 3500e6, nil, 5*sec),
	}, record.Event{T: 2 * sec, Kind: "kill", Target: "w0"}))
	rep, err := Dir(dir, ttl2s)
	if err != nil {
		t.Fatal(err)
	}
	if rep.WorkOverlaps != 0 {
		t.Errorf("killed: work overlaps %d, want 0: %v", rep.WorkOverlaps, rep.Problems)
	}

	// w0 (last write sent at 1.5 s, validity 1.75 s at a 2 s TTL) is
	// stopped from 2 s to 5 s, past its validity, and its work returns at
	// 5.2 s: it counts until 3.5 s, a TTL after that write, when its key
	// could first age out. A successor winning at 4 s passes; one winning
	// at 3 s does not.
	for _, c := range []struct {
		won      int64
		overlaps int
	}{{4 * sec, 0}, {3 * sec, 1}} {
		dir := writeRun(t, baseRun(map[string][]record.Event{
			"w0": slowStop(1, 0, sec, []int64{1500e6}, 5*sec+10e6, 5200e6),
			"w1": leaderTerm(4, c.won-100e6, c.won, nil, 6*sec),
		}, record.Event{T: 2 * sec, Kind: "pause", Target: "w0"}, record.Event{T: 5 * sec, Kind: "resume", Target: "w0"}))
		rep, err := Dir(dir, ttl2s)
		if err != nil {
			t.Fatal(err)
		}
		if rep.WorkOverlaps != c.overlaps || rep.WorksCut != 1 {
			t.Errorf("successor at %d ms: work overlaps %d, works cut %d; want %d and 1", c.won/1e6, rep.WorkOverlaps, rep.WorksCut, c.overlaps)
		}
	}
}

// TestCheckCountsOnlyLeaseWritesTowardValidity: a candidate record's
// write, acknowledged after the last renewal (as a leader's candidate
// record is rewritten every third of a TTL), renews no lease: w0, whose
// last renewal was sent at 1.5 s and whose record write at 1.9 s, stopped
// from 2 s to 5 s, counts as working until 3.5 s, a TTL after the renewal,
// not 3.9 s; a successor winning at 3.7 s passes. Its term ends at its
// validity after the renewal too: no split brain.
func TestCheckCountsOnlyLeaseWritesTowardValidity(t *testing.T) {
	w0 := slowStop(1, 0, sec, []int64{1500e6}, 5*sec+10e6, 5200e6)
	candidate := record.Event{T: 1901e6, Kind: "op", Op: "update", Key: "_kvelect.candidate.leader.dzA", Sent: 1900e6, Outcome: "ok", Rev: 9}
	w0 = append(w0[:3], append([]record.Event{candidate}, w0[3:]...)...)
	dir := writeRun(t, baseRun(map[string][]record.Event{
		"w0": w0,
		"w1": leaderTerm(4, 3600e6, 3700e6, nil, 6*sec),
	}, record.Event{T: 2 * sec, Kind: "pause", Target: "w0"}, record.Event{T: 5 * sec, Kind: "resume", Target: "w0"}))
	rep, err := Dir(dir, ttl2s)
	if err != nil {
		t.Fatal(err)
	}
	if rep.WorkOverlaps != 0 || rep.SplitBrainMS != 0 {
		t.Errorf("work overlaps %d, split brain %.1f ms; want none (the record write at 1.9 s is no renewal): %v", rep.WorkOverlaps, rep.SplitBrainMS, rep.Problems)
	}
}

func TestCheckCountsStaleTokensAndBadTokens(t *testing.T) {
	files := baseRun(map[string][]record.Event{
		"w0": leaderTerm(4, 0, sec, nil, 1500e6),
		"w1": leaderTerm(4, 2*sec, 3*sec, nil, 3500e6),
	})
	files["fence.jsonl"] = []record.Event{
		{Kind: "fence", Token: 4}, {Kind: "fence", Token: 9}, {Kind: "fence", Token: 7},
	}
	files["audit.jsonl"] = []record.Event{{Kind: "audit", Rev: 4, Op: "PUT", Worker: "w0"}}
	rep, err := Dir(writeRun(t, files), ttl2s)
	if err != nil {
		t.Fatal(err)
	}
	if rep.StaleTokensAccepted != 1 {
		t.Errorf("stale tokens accepted %d, want 1", rep.StaleTokensAccepted)
	}
	if rep.DuplicateTokens != 1 || rep.TokenRegressions != 1 || rep.UnbackedWins != 1 {
		t.Errorf("duplicates %d, regressions %d, unbacked %d; want 1 each",
			rep.DuplicateTokens, rep.TokenRegressions, rep.UnbackedWins)
	}
}

func TestCheckMeasuresFailoverPerScenario(t *testing.T) {
	dir := writeRun(t, baseRun(map[string][]record.Event{
		"w0": leaderTerm(1, 0, sec, []int64{1500e6}, 2*sec),
		"w1": leaderTerm(3, 3*sec, 5*sec, nil, 6*sec),
	}, record.Event{T: 2 * sec, Kind: "fault", Scenario: "leader-kill"}))
	rep, err := Dir(dir, ttl2s)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Scenarios) != 1 || rep.Scenarios[0].FailoverMS.Max != 3000 {
		t.Fatalf("scenarios %+v, want leader-kill with a 3000 ms failover", rep.Scenarios)
	}
}

func TestCheckCountsClaimsByUpdateAndDistrustsWinsWithoutAWrite(t *testing.T) {
	// w0 claims with an Update (no Create) and leads until 5 s; w1 announces
	// at 2 s having written nothing: its term runs to its recorded stand-down
	// at 4 s and overlaps w0 from 2 s to 4 s.
	w0 := leaderTerm(1, 0, 0, []int64{1500e6, 3000e6, 4500e6}, 5*sec)
	w0[0].Op = "update"
	dir := writeRun(t, baseRun(map[string][]record.Event{
		"w0": w0,
		"w1": {{T: 2 * sec, Kind: "won", Token: 3}, {T: 4 * sec, Kind: "lost", Token: 3}},
	}))
	rep, err := Dir(dir, ttl2s)
	if err != nil {
		t.Fatal(err)
	}
	if rep.SplitBrainMS != 2000 || rep.UnvalidatedWins != 1 || rep.OK() {
		t.Errorf("split brain %v ms, unvalidated wins %d, ok %v; want 2000, 1, false", rep.SplitBrainMS, rep.UnvalidatedWins, rep.OK())
	}
}

func TestCheckMeasuresRoundTripsOutsideFaults(t *testing.T) {
	// Every call of leaderTerm takes 1 ms. w1's 500 ms claim falls within the
	// fault window and its failed call counts as no answer: neither is a
	// round trip of the quiet server.
	w1 := leaderTerm(3, 3*sec, 5*sec, nil, 6*sec)
	w1[0].T = 3500e6
	w1 = append(w1, record.Event{T: 7 * sec, Kind: "op", Op: "update", Sent: 6500e6, Outcome: "error"})
	dir := writeRun(t, baseRun(map[string][]record.Event{
		"w0": leaderTerm(1, 0, sec, []int64{1500e6}, 2*sec),
		"w1": w1,
	}, record.Event{T: 2 * sec, Kind: "fault", Scenario: "leader-kill"}, record.Event{T: 5 * sec, Kind: "heal", Scenario: "leader-kill"}))
	rep, err := Dir(dir, ttl2s)
	if err != nil {
		t.Fatal(err)
	}
	if want := (Stats{N: 2, P50: 1, P99: 1, Max: 1}); rep.RoundTrip != want {
		t.Errorf("round trips %+v, want %+v", rep.RoundTrip, want)
	}
}

// TestCheckLeadershipComparesTheHistoryWithTheWorkers feeds the history
// check one run of two workers: a's win recorded, b's win missing, a's
// stand-down recorded twice, and a win nobody made.
func TestCheckLeadershipComparesTheHistoryWithTheWorkers(t *testing.T) {
	hist := &history{
		workers: map[string][]record.Event{
			"a": {{T: sec, Kind: "won", Token: 2}, {T: 3 * sec, Kind: "lost", Token: 2}},
			"b": {{T: 4 * sec, Kind: "won", Token: 6}},
			"c": {{T: 8 * sec, Kind: "won", Token: 9}},
		},
		leadership: []record.Event{
			{Kind: "recorded-won", Target: "a", Token: 2},
			{Kind: "recorded-stood_down", Target: "a", Token: 2},
			{Kind: "recorded-stood_down", Target: "a", Token: 2},
			{Kind: "recorded-won", Target: "z", Token: 7},
		},
	}
	rep := &Report{}
	checkLeadership(rep, hist, map[string]int64{"c": 8*sec + sec/2}, time.Second) // c was killed half a second after its win
	if rep.HistoryWins != 1 || rep.HistoryMissing != 1 || rep.HistoryExcused != 1 || rep.HistoryDuplicated != 1 || rep.HistoryUnknown != 1 || rep.HistoryOK() {
		t.Errorf("recorded %d, missing %d, excused %d, duplicated %d, unknown %d, ok %v; want 1, 1, 1, 1, 1 and not ok",
			rep.HistoryWins, rep.HistoryMissing, rep.HistoryExcused, rep.HistoryDuplicated, rep.HistoryUnknown, rep.HistoryOK())
	}

	// d's win came while JetStream was unavailable: its acts were refused.
	rep = &Report{}
	unavailable := "nats: API error: code=503 err_code=10008 description=JetStream system temporarily unavailable"
	hist.workers["d"] = []record.Event{{T: 10 * sec, Kind: "won", Token: 12}, {T: 10*sec + 60e6, Sent: 10*sec + 50e6, Kind: "act", Token: 12, Err: unavailable}}
	hist.leadership = []record.Event{{Kind: "recorded-won", Target: "a", Token: 2}, {Kind: "recorded-won", Target: "b", Token: 6}, {Kind: "recorded-won", Target: "c", Token: 9}}
	if checkLeadership(rep, hist, nil, time.Second); !rep.HistoryOK() || rep.HistoryExcused != 1 {
		t.Errorf("a win whose acts JetStream refused, unrecorded: %d excused, ok %v; want 1 and ok", rep.HistoryExcused, rep.HistoryOK())
	}
	delete(hist.workers, "d")

	// e's first act after its win timed out, and e was killed 1.5 s after
	// the win, before the record's first attempt at a 2 s TTL could time
	// out and a retry end: excused; alive, its record is owed.
	hist.workers["e"] = []record.Event{{T: 20 * sec, Kind: "won", Token: 14}, {T: 21*sec + 50e6, Sent: 20*sec + 50e6, Kind: "act", Token: 14, Err: "context deadline exceeded"}}
	rep = &Report{}
	if checkLeadership(rep, hist, map[string]int64{"e": 21*sec + sec/2}, 2*time.Second); !rep.HistoryOK() || rep.HistoryExcused != 1 {
		t.Errorf("a win whose worker was killed while its calls timed out, unrecorded: %d excused, ok %v; want 1 and ok", rep.HistoryExcused, rep.HistoryOK())
	}
	rep = &Report{}
	if checkLeadership(rep, hist, nil, 2*time.Second); rep.HistoryOK() || rep.HistoryMissing != 1 {
		t.Errorf("a win whose worker lived on, unrecorded: %d missing, ok %v; want 1 and not ok", rep.HistoryMissing, rep.HistoryOK())
	}
	delete(hist.workers, "e")

	// f's act after its win failed and f was stopped before any write of
	// its own got through: excused; one accepted act before the stop, and
	// the record is owed.
	hist.workers["f"] = []record.Event{{T: 30 * sec, Kind: "won", Token: 16}, {T: 31 * sec, Sent: 30*sec + 50e6, Kind: "act", Token: 16, Err: "context canceled"}}
	hist.harness = []record.Event{{T: 31 * sec, Kind: "stop", Target: "f"}}
	rep = &Report{}
	if checkLeadership(rep, hist, nil, time.Second); !rep.HistoryOK() || rep.HistoryExcused != 1 {
		t.Errorf("a win whose worker was stopped before any write of its got through, unrecorded: %d excused, ok %v; want 1 and ok", rep.HistoryExcused, rep.HistoryOK())
	}
	hist.workers["f"] = append(hist.workers["f"], record.Event{T: 30*sec + 500e6, Sent: 30*sec + 400e6, Kind: "act", Token: 16, Accepted: true})
	rep = &Report{}
	if checkLeadership(rep, hist, nil, time.Second); rep.HistoryOK() || rep.HistoryMissing != 1 {
		t.Errorf("a win whose worker's writes got through before its stop, unrecorded: %d missing, ok %v; want 1 and not ok", rep.HistoryMissing, rep.HistoryOK())
	}
	delete(hist.workers, "f")
	hist.harness = nil

	rep = &Report{}
	if checkLeadership(rep, hist, nil, time.Second); !rep.HistoryOK() || rep.HistoryWins != 3 {
		t.Errorf("a complete history: %d wins recorded, ok %v; want 3 and ok", rep.HistoryWins, rep.HistoryOK())
	}
}

// daemonTerm is leaderTerm for daemon d of a fleet run.
func daemonTerm(d string, token uint64, sent, won int64, renewals []int64, lost int64) []record.Event {
	events := leaderTerm(token, sent, won, renewals, lost)
	for i := range events {
		events[i].Daemon = d
	}
	return events
}

func TestCheckOfAFleetRunComparesEachDaemonsRunsOnly(t *testing.T) {
	// n0 runs d0 from 1 s to 6 s; n1 runs d1 over the same time (no
	// overlap: another daemon), then d0 from 5 s (overlap 5–6 s), with a
	// token of d0's own sequence below one of d1's.
	var n0, n1 []record.Event
	n0 = append(n0, record.Event{T: 500e6, Kind: "joined"})
	n0 = append(n0, daemonTerm("d0", 2, 0, sec, []int64{1500e6, 3000e6, 4500e6}, 6*sec)...)
	n1 = append(n1, record.Event{T: 500e6, Kind: "joined"})
	n1 = append(n1, daemonTerm("d1", 10, 0, sec, []int64{1500e6, 3000e6, 4500e6, 6000e6}, 7*sec)...)
	n1 = append(n1, daemonTerm("d0", 5, 4500e6, 5*sec, []int64{6000e6}, 7*sec)...)
	files := baseRun(map[string][]record.Event{"n0": n0, "n1": n1},
		record.Event{T: 4 * sec, Kind: "fault", Scenario: "pause-1"}, record.Event{T: 6500e6, Kind: "shutdown"})
	cfg := ttl2s
	cfg.Fleet, cfg.Daemons = true, 2
	rep, err := Dir(writeRun(t, files), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if rep.SplitBrainMS != 1000 || rep.SplitBrainEpisodes != 1 {
		t.Errorf("daemons on two nodes %v ms in %d episodes, want 1000 in 1 (d0 on n0 and n1)", rep.SplitBrainMS, rep.SplitBrainEpisodes)
	}
	if rep.TokenRegressions != 0 {
		t.Errorf("%d token regressions, want 0: each daemon's tokens grow", rep.TokenRegressions)
	}
	if rep.FinalSpread != 2 || rep.FinalLoads["n1"] != 2 {
		t.Errorf("final loads %v spread %d, want n1 running both, n0 none at shutdown: 2 apart", rep.FinalLoads, rep.FinalSpread)
	}
	if s := rep.Scenarios[0]; s.Starts != 1 || s.Changed != 1 {
		t.Errorf("after the fault: %d starts, %d moved; want 1 and 1 (d0 to n1)", s.Starts, s.Changed)
	}
	if rep.OK() {
		t.Error("report is ok despite d0 on two nodes")
	}
}

func TestCheckCountsLeadersDuringQuorumLossOnly(t *testing.T) {
	// w1 announces during the outage of one server of three, when a quorum
	// is left; w2 during that of two, when none is.
	dir := writeRun(t, baseRun(map[string][]record.Event{
		"w0": leaderTerm(1, 0, sec, nil, 2*sec),
		"w1": leaderTerm(3, 3*sec, 3500e6, nil, 4*sec),
		"w2": leaderTerm(5, 6*sec, 6500e6, nil, 7*sec),
	},
		record.Event{T: 3 * sec, Kind: "outage-start", Target: "1"}, record.Event{T: 5 * sec, Kind: "outage-end"},
		record.Event{T: 6 * sec, Kind: "outage-start", Target: "2"}, record.Event{T: 8 * sec, Kind: "outage-end"}))
	rep, err := Dir(dir, ttl2s)
	if err != nil {
		t.Fatal(err)
	}
	if rep.QuorumLossLeaders != 1 {
		t.Errorf("%d leaders announced during quorum loss, want 1 (w2's)", rep.QuorumLossLeaders)
	}
}

// TestCheckKVFailsOnAStoreThatBreaksCompareAndSet feeds the KV check two
// workers' claims of one key that both won, as a store that accepts two
// Creates would answer: not linearizable, and the history drawn with the
// fault window marked.
func TestCheckKVFailsOnAStoreThatBreaksCompareAndSet(t *testing.T) {
	dir := t.TempDir()
	hist := &history{
		harness: []record.Event{{T: 0, Kind: "fault", Scenario: "blackhole"}, {T: 5e6, Kind: "heal", Scenario: "blackhole"}},
		workers: map[string][]record.Event{
			"a": {{T: 2e6, Kind: "op", Op: "update", Key: "k", Sent: 1e6, Outcome: "ok", Rev: 5}},
			"b": {{T: 4e6, Kind: "op", Op: "update", Key: "k", Sent: 3e6, Outcome: "ok", Rev: 6}},
		},
	}
	rep := &Report{}
	checkKV(rep, hist, time.Second, "", dir)
	if rep.KVLinearizable != "false" || rep.KVOps != 2 || rep.KVOK() {
		t.Errorf("two claims of one key over no entry, both won: linearizable %q over %d, ok %v; want false over 2, not ok", rep.KVLinearizable, rep.KVOps, rep.KVOK())
	}
	if page, err := os.ReadFile(filepath.Join(dir, "kv-linearizability.html")); err != nil || !strings.Contains(string(page), "blackhole") {
		t.Errorf("the drawn history (%v) does not mark the fault", err)
	}
}

// TestCheckKVSettlesUnknownWritesFromTheAudit: b's claim timed out while a
// held the key, and a's renewal was then refused. On its own the claim may
// have taken effect after a's value aged out; the audit shows it took
// revision 6 over a's live value, which fails the check. A check that runs
// out of time fails the run too.
func TestCheckKVSettlesUnknownWritesFromTheAudit(t *testing.T) {
	hist := func(withRecord bool) *history {
		h := &history{
			workers: map[string][]record.Event{
				"a": {
					{T: 2e6, Kind: "op", Op: "update", Key: "k", Value: "a", Sent: 1e6, Outcome: "ok", Rev: 5},
					{T: 9e6, Kind: "op", Op: "update", Key: "k", Value: "a", Expected: 5, Sent: 7e6, Outcome: "conflict"},
					{T: 9e6, Kind: "op", Op: "put", Key: "other", Value: "a", Sent: 8e6, Outcome: "ok", Rev: 7},
				},
				"b": {{T: 6e6, Kind: "op", Op: "update", Key: "k", Value: "b", Sent: 3e6, Outcome: "error"}},
			},
		}
		if withRecord {
			h.audit = []record.Event{
				{Kind: "audit", Rev: 5, Op: "PUT", Key: "k", Value: "a", Conditional: true},
				{Kind: "audit", Rev: 6, Op: "PUT", Key: "k", Value: "b", Conditional: true},
				{Kind: "audit", Rev: 7, Op: "PUT", Key: "other", Value: "a"},
			}
			h.harness = []record.Event{{Kind: "last-revision", Rev: 7}}
		}
		return h
	}
	rep := &Report{}
	checkKV(rep, hist(false), time.Second, "", t.TempDir())
	if rep.KVLinearizable != "true" || rep.KVUnknown != 1 || rep.KVSettled != 0 {
		t.Errorf("without the audit: linearizable %q, %d unknown, %d settled; want true, 1, 0", rep.KVLinearizable, rep.KVUnknown, rep.KVSettled)
	}
	rep = &Report{}
	checkKV(rep, hist(true), time.Second, "", t.TempDir())
	if rep.KVLinearizable != "false" || rep.KVSettled != 1 || rep.KVRecordGaps != 4 || rep.KVUnexplained != 0 || rep.KVOK() {
		t.Errorf("with the audit: linearizable %q, %d settled, %d gaps, %d unexplained, ok %v; want false, 1, 4 (revisions 1 to 4), 0, not ok",
			rep.KVLinearizable, rep.KVSettled, rep.KVRecordGaps, rep.KVUnexplained, rep.KVOK())
	}
	if (&Report{KVLinearizable: "inconclusive"}).KVOK() {
		t.Errorf("an inconclusive check passes the run")
	}
}

// TestCheckKVKnowsAWriteCutShortByAKill: a's candidate record write was
// sent, the server applied it (revision 2), and a was killed before it
// returned. Its call event makes it a write of unknown outcome, which may
// have written revision 2; without it, revision 2 is a write nobody made.
func TestCheckKVKnowsAWriteCutShortByAKill(t *testing.T) {
	hist := func(withCall bool) *history {
		h := &history{
			workers: map[string][]record.Event{"a": {
				{T: 1e6, Kind: "call", Op: "put", Key: "rec", Value: "a", Sent: 1e6},
				{T: 2e6, Kind: "op", Op: "put", Key: "rec", Value: "a", Sent: 1e6, Outcome: "ok", Rev: 1},
			}},
			audit: []record.Event{
				{Kind: "audit", Rev: 1, Op: "PUT", Key: "rec", Value: "a"},
				{Kind: "audit", Rev: 2, Op: "PUT", Key: "rec", Value: "a2"},
			},
			harness: []record.Event{{Kind: "last-revision", Rev: 2}},
		}
		if withCall {
			h.workers["a"] = append(h.workers["a"], record.Event{T: 3e6, Kind: "call", Op: "put", Key: "rec", Value: "a2", Sent: 3e6})
		}
		return h
	}
	rep := &Report{}
	checkKV(rep, hist(true), time.Second, "", t.TempDir())
	if !rep.KVOK() || rep.KVUnknown != 1 || rep.KVUnexplained != 0 {
		t.Errorf("with the call recorded: ok %v, %d unknown, %d unexplained (%v); want ok, 1, 0",
			rep.KVOK(), rep.KVUnknown, rep.KVUnexplained, rep.KVProblems)
	}
	rep = &Report{}
	checkKV(rep, hist(false), time.Second, "", t.TempDir())
	if rep.KVOK() || rep.KVUnexplained != 1 {
		t.Errorf("without it: ok %v, %d unexplained; want not ok, 1", rep.KVOK(), rep.KVUnexplained)
	}
}

// TestCheckReplicasFailsOnCopiesThatDiffer reads replicas that agree, and
// one that lost its last message: that fails the run.
func TestCheckReplicasFailsOnCopiesThatDiffer(t *testing.T) {
	same := `[{"server":"n1","msgs":9,"first_seq":3,"last_seq":40},{"server":"n2","msgs":9,"first_seq":3,"last_seq":40},{"server":"n3","msgs":9,"first_seq":3,"last_seq":40}]`
	rep := &Report{KVLinearizable: "true"}
	checkReplicaEvents(rep, []record.Event{{Kind: "replicas", Cause: same}})
	if rep.ReplicasAgree == nil || !*rep.ReplicasAgree || !rep.OK() {
		t.Fatalf("three equal copies: agree %v, ok %v; want true and ok", rep.ReplicasAgree, rep.OK())
	}
	differ := strings.Replace(same, `"server":"n3","msgs":9,"first_seq":3,"last_seq":40`, `"server":"n3","msgs":8,"first_seq":3,"last_seq":39`, 1)
	rep = &Report{KVLinearizable: "true"}
	checkReplicaEvents(rep, []record.Event{{Kind: "replicas", Cause: differ}})
	if rep.ReplicasAgree == nil || *rep.ReplicasAgree || rep.OK() || len(rep.Problems) != 1 || !strings.Contains(rep.Problems[0], "n3: 8 messages, 3–39") {
		t.Errorf("a copy that lost its last message: agree %v, ok %v, problems %q; want false, not ok, and n3 named", rep.ReplicasAgree, rep.OK(), rep.Problems)
	}
}
