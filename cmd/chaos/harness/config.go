//go:build unix

package harness

import (
	"fmt"
	"time"
)

// Config is what a run is: its servers, its workers, its TTL and how long it
// injects faults.
type Config struct {
	// Scenarios are the names of the scenarios chosen; nil for every one
	// that applies.
	Scenarios  []string
	Rounds     int
	TTL        time.Duration
	Workers    int
	Cluster    bool
	Budget     time.Duration // no scenario starts after it (0: no limit)
	SyncAlways bool
	Seed       uint64
	Markers    bool
	Priorities bool
	Fleet      bool
	Daemons    int
	// Agents: the fleet's nodes are election agents, run from the binary
	// Election (built for the run if empty).
	Agents   bool
	Election string
	// Supercluster: three regions of one server each, joined by gateways;
	// Leaf: a hub and a leaf node server (topologies.go).
	Supercluster bool
	Leaf         bool
	// ShortTopology: -short with -supercluster or -leaf, which runs the
	// topology's own scenarios and some of the workers'.
	ShortTopology bool
	// StopDelay: how long a worker's work goes on after its leadership
	// context is cancelled (worker -stop-delay).
	StopDelay time.Duration
}

// DaemonNames returns the daemons of a fleet run, or the one key of a
// single-key run, "".
func (cfg Config) DaemonNames() []string {
	if !cfg.Fleet {
		return []string{""}
	}
	names := make([]string, cfg.Daemons)
	for i := range names {
		names[i] = fmt.Sprintf("d%02d", i)
	}
	return names
}

// Mode names the run's topology: single, cluster, supercluster or leaf.
func (cfg Config) Mode() string {
	switch {
	case cfg.Cluster:
		return "cluster"
	case cfg.Supercluster:
		return "supercluster"
	case cfg.Leaf:
		return "leaf"
	}
	return "single"
}

// Topology returns "supercluster" or "leaf" for those modes, else "".
func (cfg Config) Topology() string {
	if m := cfg.Mode(); m == "supercluster" || m == "leaf" {
		return m
	}
	return ""
}
