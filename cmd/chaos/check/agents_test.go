//go:build unix

package check

import (
	"fmt"
	"testing"
	"time"

	"github.com/kvelect/election/cmd/chaos/record"
)

// actorEvents is the record of an actor of daemon on node with pid and
// token: its start at from, an accepted act every half second, and its
// last act at to.
func actorEvents(node, daemon string, pid int, token uint64, from, to int64) []record.Event {
	events := []record.Event{{T: from, Worker: node, Kind: "start", Daemon: daemon, Token: token, PID: pid}}
	seq := 1
	for t := from + sec/2; t < to; t += sec / 2 {
		events = append(events, record.Event{T: t, Worker: node, Kind: "act", Daemon: daemon, Sent: t - 1e6, Token: token, Seq: seq, Accepted: true})
		seq++
	}
	return append(events, record.Event{T: to, Worker: node, Kind: "act", Daemon: daemon, Sent: to - 1e6, Token: token, Seq: seq, Accepted: true})
}

// agentsRun returns the files of an -agents run of the actors, with the
// harness's events: the bucket's log holds each actor's token as its
// node's write, and the fence every act accepted.
func agentsRun(actors [][]record.Event, harness ...record.Event) map[string][]record.Event {
	files := map[string][]record.Event{
		"harness.jsonl": append([]record.Event{{T: 0, Kind: "cold-start"}}, append(harness, record.Event{T: 20 * sec, Kind: "end"})...),
		"audit.jsonl":   nil,
		"fence.jsonl":   nil,
	}
	for i, events := range actors {
		files[fmt.Sprintf("actor-%04d.jsonl", i)] = events
		start := events[0]
		files["audit.jsonl"] = append(files["audit.jsonl"], record.Event{Kind: "audit", Rev: start.Token, Op: "PUT", Worker: start.Worker})
		for _, ev := range events {
			if ev.Kind == "act" && ev.Accepted {
				files["fence.jsonl"] = append(files["fence.jsonl"], record.Event{Kind: "fence", Daemon: ev.Daemon, Token: ev.Token, Worker: ev.Worker, Seq: ev.Seq, PID: start.PID, Sent: ev.Sent})
			}
		}
	}
	return files
}

var agentsCfg = Params{TTL: 2 * time.Second, Workers: 2, Rounds: 1, Fleet: true, Agents: true, Daemons: 2}

func TestCheckOfAnAgentsRunFindsOverlappingActors(t *testing.T) {
	// d0 runs on n0 with token 2 from 1 s to 5 s, again there with the
	// same token from 5.2 s to 6 s (a restart under the same hold), and on
	// n1 with token 7 from 5.5 s: overlap 5.5–6 s. d1 runs on n1 meanwhile,
	// another daemon.
	rep, err := Dir(writeRun(t, agentsRun([][]record.Event{
		actorEvents("n0", "d0", 10, 2, sec, 5*sec),
		actorEvents("n0", "d0", 11, 2, 5200e6, 6*sec),
		actorEvents("n1", "d0", 12, 7, 5500e6, 8*sec),
		actorEvents("n1", "d1", 13, 4, sec, 8*sec),
	})), agentsCfg)
	if err != nil {
		t.Fatal(err)
	}
	if rep.SplitBrainMS != 500 || rep.SplitBrainEpisodes != 1 {
		t.Errorf("daemon on two nodes %v ms in %d episodes, want 500 in 1", rep.SplitBrainMS, rep.SplitBrainEpisodes)
	}
	if rep.DuplicateTokens != 0 || rep.TokenRegressions != 0 || rep.UnbackedWins != 0 {
		t.Errorf("duplicates %d, regressions %d, unbacked %d; want none: a restart under one hold is one hold",
			rep.DuplicateTokens, rep.TokenRegressions, rep.UnbackedWins)
	}
	if rep.ClosestHandoverMS != -500 || rep.Handovers != 1 {
		t.Errorf("closest handover %v ms over %d, want -500 over 1", rep.ClosestHandoverMS, rep.Handovers)
	}
	if rep.OK() {
		t.Error("report is ok despite d0 on two nodes")
	}
}

func TestCheckOfAnAgentsRunEndsAKilledActorAtItsLastFencedAppend(t *testing.T) {
	// n0's actor records its last act at 3 s, but the fence holds an
	// append it sent at 4.5 s: it ran until then, over n1's start at 4 s.
	files := agentsRun([][]record.Event{
		actorEvents("n0", "d0", 10, 2, sec, 3*sec),
		actorEvents("n1", "d0", 20, 5, 4*sec, 6*sec),
	})
	files["fence.jsonl"] = append(files["fence.jsonl"], record.Event{Kind: "fence", Daemon: "d0", Token: 2, Worker: "n0", Seq: 99, PID: 10, Sent: 4500e6})
	rep, err := Dir(writeRun(t, files), agentsCfg)
	if err != nil {
		t.Fatal(err)
	}
	if rep.SplitBrainMS != 500 {
		t.Errorf("daemon on two nodes %v ms, want 500 (4–4.5 s)", rep.SplitBrainMS)
	}
	if rep.StaleTokensAccepted != 1 {
		t.Errorf("stale tokens accepted %d, want 1 (n0's append after n1's)", rep.StaleTokensAccepted)
	}
}

func TestCheckOfAnAgentsRunChecksTheDaemonsOfKilledAndPausedAgents(t *testing.T) {
	// n0 is killed at 2 s; its actor is gone 600 ms later, past the loss
	// margin (250 ms at a 2 s TTL). n1 is paused from 4 s to 6.1 s, past
	// its work deadline (1875 ms after its last write, at the latest 5.875
	// s): one actor is gone at 5.8 s, the other only at 6.5 s. One act of
	// n1's is missing from the fence, and one actor outlived the agents.
	a2 := actorEvents("n1", "d2", 12, 6, sec, 5700e6)
	files := agentsRun([][]record.Event{
		actorEvents("n0", "d0", 10, 2, sec, 2*sec),
		actorEvents("n1", "d1", 11, 4, sec, 6400e6),
		a2,
	},
		record.Event{T: 2 * sec, Kind: "fault", Scenario: "leader-kill", Target: "n0"},
		record.Event{T: 2 * sec, Kind: "kill", Target: "n0"},
		record.Event{T: 2600e6, Kind: "actor-gone", Target: "n0", Daemon: "d0", PID: 10},
		record.Event{T: 3 * sec, Kind: "heal", Scenario: "leader-kill"},
		record.Event{T: 4 * sec, Kind: "fault", Scenario: "pause-1", Target: "n1"},
		record.Event{T: 4 * sec, Kind: "pause", Target: "n1"},
		record.Event{T: 5800e6, Kind: "actor-gone", Target: "n1", Daemon: "d2", PID: 12},
		record.Event{T: 6100e6, Kind: "resume", Target: "n1"},
		record.Event{T: 6100e6, Kind: "heal", Scenario: "pause-1"},
		record.Event{T: 6500e6, Kind: "actor-gone", Target: "n1", Daemon: "d1", PID: 11},
		record.Event{T: 7 * sec, Kind: "shutdown"},
		record.Event{T: 8 * sec, Kind: "leftover", Target: "n1", Daemon: "d1", PID: 11},
	)
	fence := files["fence.jsonl"]
	files["fence.jsonl"] = fence[:len(fence)-1] // a2's last act
	cfg := agentsCfg
	cfg.Daemons = 3
	rep, err := Dir(writeRun(t, files), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if rep.KillLate != 1 || rep.PauseSurvivors != 1 || rep.Leftovers != 1 || rep.ActsMissing != 1 {
		t.Errorf("late after kill %d, alive past the work deadline %d, left over %d, acts missing %d; want 1 each",
			rep.KillLate, rep.PauseSurvivors, rep.Leftovers, rep.ActsMissing)
	}
	gone := map[string]Stats{}
	for _, s := range rep.Scenarios {
		gone[s.Name] = s.GoneMS
	}
	if gone["leader-kill"] != (Stats{N: 1, P50: 600, P99: 600, Max: 600}) || gone["pause-1"] != (Stats{N: 1, P50: 1800, P99: 1800, Max: 1800}) {
		t.Errorf("daemons gone %+v; want 600 ms after the kill, and the one gone during the pause 1800 ms after it began", gone)
	}
	if rep.OK() {
		t.Error("report is ok despite a late, a surviving and a leftover daemon")
	}
}

func TestCheckOfAnAgentsRunPassesACleanHandover(t *testing.T) {
	// d0 moves from n0 to n1: n0's actor's last record at 3 s, n1's first
	// at 3.2 s; both agents joined and each ends with one daemon.
	rep, err := Dir(writeRun(t, agentsRun([][]record.Event{
		actorEvents("n0", "d0", 10, 2, sec, 3*sec),
		actorEvents("n1", "d0", 20, 5, 3200e6, 9*sec),
		actorEvents("n0", "d1", 30, 3, sec, 9*sec),
	},
		record.Event{T: 500e6, Kind: "joined", Target: "n0"},
		record.Event{T: 500e6, Kind: "joined", Target: "n1"},
		record.Event{T: 8 * sec, Kind: "shutdown"},
	)), agentsCfg)
	if err != nil {
		t.Fatal(err)
	}
	if !rep.OK() || rep.ClosestHandoverMS != 200 || rep.FinalSpread != 0 {
		t.Errorf("ok %v, closest handover %v ms, final loads %v; want ok, 200 ms, one daemon each (problems %v)",
			rep.OK(), rep.ClosestHandoverMS, rep.FinalLoads, rep.Problems)
	}
}
