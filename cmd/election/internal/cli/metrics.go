package cli

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/kvelect/election"
	"github.com/kvelect/election/fleet"
	"github.com/kvelect/election/promelection"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// metricsServer serves /metrics and /healthz: for run's and sidecar's
// election, the agent's fleet, or an observer's view (status --watch,
// dashboard). Each server has a registry of its own, with
// kvelect_build_info in it.
type metricsServer struct {
	listener  net.Listener
	collector *promelection.Collector // nil but for run and sidecar
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
	m, err := listenRegistry(addr, collector)
	if err != nil {
		return nil, err
	}
	m.collector = collector
	return m, nil
}

// listenRegistry listens on addr and makes the server's registry, with
// kvelect_build_info and the given collectors in it.
func listenRegistry(addr string, collectors ...prometheus.Collector) (*metricsServer, error) {
	registry := prometheus.NewRegistry()
	for _, c := range append([]prometheus.Collector{buildInfo()}, collectors...) {
		if err := registry.Register(c); err != nil {
			return nil, err
		}
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--metrics: %w", err)
	}
	return &metricsServer{listener: ln, registry: registry, served: make(chan struct{})}, nil
}

// buildInfo is kvelect_build_info{version, goversion}, always 1.
func buildInfo() prometheus.Collector {
	v, goVersion, _ := versionParts()
	return prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Namespace:   "kvelect",
		Name:        "build_info",
		Help:        "Always 1; its labels name the election command's version and the Go version it was built with.",
		ConstLabels: prometheus.Labels{"version": v, "goversion": goVersion},
	}, func() float64 { return 1 })
}

// serve serves the metrics and the health of e until close.
func (m *metricsServer) serve(e *election.Election, tolerance time.Duration) {
	m.collector.WatchHealth(e)
	m.serveHealth(election.HealthHandler(tolerance, e))
}

// serveHealth serves the metrics, and health on /healthz, until close.
func (m *metricsServer) serveHealth(health http.Handler) {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(m.registry, promhttp.HandlerOpts{}))
	mux.Handle("GET /healthz", health)
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

// memberHealth answers /healthz of the agent: 200 while the node is a
// member of the fleet, 503 before it has joined and once it is not.
func memberHealth(node func() *fleet.Node) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if n := node(); n != nil && n.IsMember() {
			w.Write([]byte("ok\n"))
			return
		}
		http.Error(w, "not a member of the fleet", http.StatusServiceUnavailable)
	})
}

// listenObserverMetrics listens on addr (or returns nil, nil without one)
// and serves /metrics with an observer's series, and /healthz (200 while
// the process runs).
func listenObserverMetrics(addr string) (*metricsServer, *promelection.ObserverCollector, error) {
	if addr == "" {
		return nil, nil, nil
	}
	om := promelection.NewObserverCollector()
	m, err := listenRegistry(addr, om)
	if err != nil {
		return nil, nil, err
	}
	m.serveHealth(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.Write([]byte("ok\n")) }))
	return m, om, nil
}
