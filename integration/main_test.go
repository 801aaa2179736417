// Package integration tests elections against real embedded nats-servers:
// a single node, a 3-node cluster with an R3 bucket, and the superclusters
// and leaf nodes of the topology kit (internal/topology).
package integration

import (
	"testing"

	"github.com/kvelect/election/internal/testenv"
	"github.com/kvelect/election/internal/topology"
)

func TestMain(m *testing.M) {
	// A child process the topology kit started to run a server (Self).
	topology.ServeIfAsked()
	testenv.VerifyNoLeaks(m)
}
