// Package embedded starts single JetStream nats-server instances inside the
// process, on free loopback ports: for tests, the demo and the chaos
// harness. Topologies of several servers are package topology's, which
// starts each of its servers here.
package embedded

import (
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// readyTimeout bounds how long a server may take to take clients: its
// listeners open only once JetStream is enabled, which a CPU-starved test
// run (the README's test command runs packages side by side under -race)
// has taken over 30 s to do, as the supercluster's formation has.
const readyTimeout = 60 * time.Second

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
	s.Start()
	if !s.ReadyForConnections(readyTimeout) {
		Shutdown(s)
		return nil, fmt.Errorf("embedded nats-server %s: not ready for connections after %v", opts.ServerName, readyTimeout)
	}
	return s, nil
}

// FreePorts finds n free loopback ports and releases them for the caller, for
// servers whose ports must be known before they start (cluster routes,
// restarts on the same port).
func FreePorts(n int) ([]int, error) {
	var listeners []net.Listener
	defer func() {
		for _, l := range listeners {
			l.Close()
		}
	}()
	ports := make([]int, n)
	for i := range ports {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("reserving a loopback port: %w", err)
		}
		listeners = append(listeners, l)
		ports[i] = l.Addr().(*net.TCPAddr).Port
	}
	return ports, nil
}
