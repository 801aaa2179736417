package main

import (
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// runServer is one nats-server process: the harness runs itself with
// "server" so that it can SIGKILL and restart servers. It prints "ready" once
// it accepts clients, and shuts down gracefully on SIGTERM.
func runServer(args []string) error {
	fs := flag.NewFlagSet("server", flag.ContinueOnError)
	name := fs.String("name", "n1", "server name")
	port := fs.Int("port", 0, "client port")
	store := fs.String("store", "", "JetStream store directory")
	cluster := fs.String("cluster", "", "cluster name; empty runs a single server")
	clusterPort := fs.Int("cluster-port", 0, "cluster port")
	routes := fs.String("routes", "", "cluster routes, comma separated")
	syncAlways := fs.Bool("sync-always", false, "fsync every write before acknowledging it")
	monitor := fs.Int("monitor-port", 0, "HTTP monitoring port (/jsz), 0 for none")
	advertise := fs.String("cluster-advertise", "", "the route address gossiped to other servers")
	if err := fs.Parse(args); err != nil {
		return err
	}
	opts := &server.Options{
		ServerName: *name,
		Host:       "127.0.0.1",
		Port:       *port,
		JetStream:  true,
		StoreDir:   *store,
		SyncAlways: *syncAlways,
		HTTPHost:   "127.0.0.1",
		HTTPPort:   *monitor,
		NoLog:      true,
		NoSigs:     true,
	}
	if *cluster != "" {
		// NoAdvertise: clients reach servers only through the harness's proxies.
		opts.Cluster = server.ClusterOpts{Name: *cluster, Host: "127.0.0.1", Port: *clusterPort, NoAdvertise: true, Advertise: *advertise}
		opts.Routes = server.RoutesFromStr(*routes)
	}
	s, err := server.NewServer(opts)
	if err != nil {
		return err
	}
	s.Start()
	if !s.ReadyForConnections(30 * time.Second) {
		return fmt.Errorf("server %s not ready after 30s", *name)
	}
	fmt.Println("ready")

	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, os.Interrupt)
	<-sig
	s.Shutdown()
	s.WaitForShutdown()
	return nil
}
