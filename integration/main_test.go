// Package integration tests elections against real embedded nats-servers:
// a single node, and a 3-node cluster with an R3 bucket.
package integration

import (
	"testing"

	"github.com/kvelect/election/internal/testenv"
)

func TestMain(m *testing.M) {
	runServerProcessIfAsked()
	testenv.VerifyNoLeaks(m)
}
