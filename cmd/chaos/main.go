//go:build unix

// Command chaos is a fault-injection harness for the election library. It
// runs campaigners as separate processes against nats-server processes (one,
// or three clustered), injects faults, records every process's history on
// the shared monotonic clock, and checks that no two leaders ever overlapped.
//
//	go run ./cmd/chaos                  # default mix, single server, readable table
//	go run ./cmd/chaos -cluster         # a 3-node cluster with an R3 bucket
//	go run ./cmd/chaos -short           # the CI mode
//	go run ./cmd/chaos -json -html run.html
//
// With -fleet the processes are nodes of a fleet (package fleet) running
// daemons, and the checker asks the same of every daemon: never on two nodes
// at once, stale tokens refused.
//
//	go run ./cmd/chaos -fleet           # 3 nodes, 12 daemons
//
// With -agents the nodes are election agent processes (the command, built
// for the run or given with -election) whose daemons are shell commands that
// fork: each runs an actor, this binary again, as a grandchild of the agent
// or deeper. The actors record their own runs and acts, and the checker
// asks of them what it asks of a fleet's daemons, plus that the daemons of a
// killed or paused agent die in time and that none outlives its agent. Its
// own faults stop (SIGSTOP) the guard of one of the leader's daemons while
// the daemon's key is deleted (guard-stop) or the agent leaves
// (guard-stop-leave): the agent must kill the daemon itself.
//
//	go run ./cmd/chaos -agents          # 3 agents, 8 daemons, TTL 2s
//	go run ./cmd/chaos -short -agents -election /tmp/election-old
//
// With -supercluster the servers are three regions joined by gateways, the
// bucket in the first, the workers spread over the regions; with -leaf a
// hub and a leaf node with JetStream domains of their own, the bucket in the
// hub's. The harness cuts and delays the links between them (see
// docs/topologies.md).
//
//	go run ./cmd/chaos -short -supercluster
//	go run ./cmd/chaos -short -leaf
//
// It exits 1 when an invariant is broken and keeps the histories of that run.
// It re-executes itself as "chaos worker …", "chaos node …", "chaos actor",
// and for each nats-server of the run as a server of the topology kit
// (internal/topology).
package main

import (
	"fmt"
	"os"
	"slices"

	"github.com/kvelect/election/cmd/chaos/worker"
	"github.com/kvelect/election/internal/sim"
	"github.com/kvelect/election/internal/topology"
)

// main runs the harness, or one of the roles it re-executes itself as.
func main() {
	topology.ServeIfAsked() // a server of the run (harness.Harness starts them)
	if slices.Contains(os.Args[1:], "-simulate") || slices.Contains(os.Args[1:], "--simulate") {
		sim.Command(os.Args[1:]) // the simulator (internal/sim), in place of real processes
	}
	roles := map[string]func([]string) error{"worker": worker.RunWorker, "node": worker.RunNode, "actor": worker.RunActor}
	if run, ok := roles[firstArg(os.Args)]; ok {
		if err := run(os.Args[2:]); err != nil {
			fmt.Fprintf(os.Stderr, "chaos %s: %v\n", os.Args[1], err)
			os.Exit(1)
		}
		return
	}
	opts, err := parseFlags(os.Args[1:])
	if err != nil {
		fmt.Fprintln(os.Stderr, "chaos:", err)
		os.Exit(2)
	}
	os.Exit(runChaos(opts))
}

// firstArg returns args[1], or "" if there is none.
func firstArg(args []string) string {
	if len(args) < 2 {
		return ""
	}
	return args[1]
}
