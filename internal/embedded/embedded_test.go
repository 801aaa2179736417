package embedded_test

import (
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/kvelect/election/internal/embedded"
	"github.com/kvelect/election/internal/testenv"
	"github.com/nats-io/nats-server/v2/server"
)

func TestMain(m *testing.M) { testenv.VerifyNoLeaks(m) }

// TestAServerWhosePortIsTakenFailsAtOnce starts a server on a port another
// socket holds: nats-server reports that only to its logger, and the
// server would otherwise wait out the whole ready timeout.
func TestAServerWhosePortIsTakenFailsAtOnce(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	port := taken.Addr().(*net.TCPAddr).Port
	began := time.Now()
	s, err := embedded.Configured(t.TempDir(), func(o *server.Options) { o.Port = port })
	if err == nil {
		embedded.Shutdown(s)
		t.Fatal("a server on a taken port started")
	}
	if !strings.Contains(err.Error(), fmt.Sprint(port)) {
		t.Errorf("the error does not name the port %d: %v", port, err)
	}
	if took := time.Since(began); took > 5*time.Second {
		t.Errorf("the error came after %v", took)
	}
}

// TestFreePortsLieBelowTheEphemeralRange asks for many ports: none is one
// the kernel could give an outgoing connection, and none twice.
func TestFreePortsLieBelowTheEphemeralRange(t *testing.T) {
	ports, err := embedded.FreePorts(200)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int]bool{}
	for _, p := range ports {
		if p < 10000 || p >= 32768 {
			t.Errorf("port %d is outside 10000–32767", p)
		}
		if seen[p] {
			t.Errorf("port %d given twice", p)
		}
		seen[p] = true
	}
}
