package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/kvelect/election"
	"github.com/kvelect/election/promelection"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// metricsServer serves /metrics and /healthz for run's election.
type metricsServer struct {
	listener  net.Listener
	collector *promelection.Collector
	registry  *prometheus.Registry
	server    *http.Server
	served    chan struct{} // closed when Serve has returned
}

// checkMetricsAddr checks --metrics before anything listens.
func checkMetricsAddr(addr string) error {
	if addr == "" {
		return nil
	}
	if _, _, err := net.SplitHostPort(addr); err != nil {
		return fmt.Errorf("--metrics %q: want HOST:PORT, such as 127.0.0.1:9090 or :9090", addr)
	}
	return nil
}

// listenMetrics listens on addr, so that a taken port fails run before it
// campaigns, and makes the collector the election reports to.
func listenMetrics(addr string) (*metricsServer, error) {
	collector, err := promelection.NewCollector()
	if err != nil {
		return nil, err
	}
	registry := prometheus.NewRegistry()
	if err := registry.Register(collector); err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--metrics: %w", err)
	}
	return &metricsServer{listener: ln, collector: collector, registry: registry, served: make(chan struct{})}, nil
}

// serve serves the metrics and the health of e until close.
func (m *metricsServer) serve(e *election.Election, tolerance time.Duration) {
	m.collector.WatchHealth(e)
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(m.registry, promhttp.HandlerOpts{}))
	mux.Handle("GET /healthz", election.HealthHandler(tolerance, e))
	m.server = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		defer close(m.served)
		m.server.Serve(m.listener) // returns ErrServerClosed after Shutdown
	}()
}

// close stops the server, or the listener if serve was not called.
func (m *metricsServer) close() error {
	if m.server == nil {
		return m.listener.Close()
	}
	ctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
	defer cancel()
	err := m.server.Shutdown(ctx)
	<-m.served
	if errors.Is(err, context.DeadlineExceeded) {
		return m.server.Close()
	}
	return err
}
