// Package embedded starts single JetStream nats-server instances inside the
// process, on free loopback ports: for tests, the demo and the chaos
// harness. Topologies of several servers are package topology's, which
// starts each of its servers here.
package embedded

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// readyTimeout bounds how long a server may take to take clients: its
// listeners open only once JetStream is enabled, which takes a few
// milliseconds, and seconds on a test run loading the CPU.
const readyTimeout = 30 * time.Second

// Server starts a single JetStream server storing its data in dir.
func Server(dir string) (*server.Server, error) {
	return Configured(dir, func(*server.Options) {})
}

// Configured starts a single server as Server does, with the options
// configure sets on top: authorization, TLS, a JetStream domain, leaf nodes.
func Configured(dir string, configure func(*server.Options)) (*server.Server, error) {
	opts := &server.Options{
		ServerName: "n1",
		Host:       "127.0.0.1",
		Port:       server.RANDOM_PORT,
		JetStream:  true,
		StoreDir:   dir,
		NoLog:      true,
		NoSigs:     true,
	}
	configure(opts)
	return start(opts)
}

// ClientURLs returns the servers' client URLs joined by commas, as
// nats.Connect takes them.
func ClientURLs(nodes []*server.Server) string {
	urls := make([]string, len(nodes))
	for i, s := range nodes {
		urls[i] = s.ClientURL()
	}
	return strings.Join(urls, ",")
}

// Shutdown stops the servers and waits until they have stopped.
func Shutdown(nodes ...*server.Server) {
	for _, s := range nodes {
		s.Shutdown()
	}
	for _, s := range nodes {
		s.WaitForShutdown()
	}
}

func start(opts *server.Options) (*server.Server, error) {
	s, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("embedded nats-server: %w", err)
	}
	fatal := &fatalLog{err: make(chan error, 1)}
	s.SetLogger(fatal, false, false)
	s.Start()
	for end := time.Now().Add(readyTimeout); !s.ReadyForConnections(50 * time.Millisecond); {
		select {
		case err := <-fatal.err:
			Shutdown(s)
			return nil, fmt.Errorf("embedded nats-server %s: %w", opts.ServerName, err)
		default:
		}
		if time.Now().After(end) {
			Shutdown(s)
			return nil, fmt.Errorf("embedded nats-server %s: not ready for connections after %v", opts.ServerName, readyTimeout)
		}
	}
	return s, nil
}

// fatalLog is a server's logger that keeps its first fatal error and drops
// everything else: nats-server reports a listener it cannot open (a port
// taken) only there, and without a logger that exits, its server then
// never takes clients.
type fatalLog struct{ err chan error }

func (f *fatalLog) Fatalf(format string, v ...any) {
	select {
	case f.err <- fmt.Errorf(format, v...):
	default:
	}
}

func (*fatalLog) Noticef(string, ...any) {}
func (*fatalLog) Warnf(string, ...any)   {}
func (*fatalLog) Errorf(string, ...any)  {}
func (*fatalLog) Debugf(string, ...any)  {}
func (*fatalLog) Tracef(string, ...any)  {}

// FreePorts finds n free loopback ports and releases them for the caller, for
// servers whose ports must be known before they start (cluster routes,
// restarts on the same port). They lie below the kernel's ephemeral range,
// which the kernel draws from for every outgoing connection and every
// listener on port 0: a port taken from that range and released could be
// any connection's local port by the time its server listens on it, and
// gateways and routes dialling through proxies take many. (A supercluster's
// server then failed to listen, once in a few dozen starts.)
func FreePorts(n int) ([]int, error) {
	low := ephemeralLow()
	if low-firstPort < 4*n {
		return nil, fmt.Errorf("reserving %d loopback ports: only %d lie between %d and the ephemeral range's start %d; the tests need %d there (raise the range's start: sysctl net.ipv4.ip_local_port_range)", n, max(low-firstPort, 0), firstPort, low, 4*n)
	}
	var listeners []net.Listener
	defer func() {
		for _, l := range listeners {
			l.Close()
		}
	}()
	ports := make([]int, 0, n)
	for tries := 0; len(ports) < n; tries++ {
		if tries == 100*n {
			return nil, fmt.Errorf("reserving %d loopback ports: %d tries between %d and %d found only %d free", n, tries, firstPort, low, len(ports))
		}
		port := firstPort + rand.IntN(low-firstPort)
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil {
			continue // taken: by this call's own listeners, too
		}
		listeners = append(listeners, l)
		ports = append(ports, port)
	}
	return ports, nil
}

// firstPort is the lowest port FreePorts gives: above the ports services
// commonly use.
const firstPort = 10000

// ephemeralLow returns the first port of the kernel's ephemeral range:
// Linux's, as configured; elsewhere the lower of Linux's default and the
// IANA range other systems use.
func ephemeralLow() int {
	const fallback = 32768
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return fallback
	}
	fields := strings.Fields(string(b))
	if len(fields) != 2 {
		return fallback
	}
	low, err := strconv.Atoi(fields[0])
	if err != nil {
		return fallback
	}
	return low
}
