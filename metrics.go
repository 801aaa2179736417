package election

import "time"

// Metrics receives an election's measurements. Pass one with WithMetrics; the
// package github.com/kvelect/election/promelection has one that is a
// Prometheus collector. An election calls its Metrics from its own goroutine,
// so the methods must return quickly; one Metrics may serve many elections at
// once.
type Metrics interface {
	// Campaigning is called when an election starts to campaign, with the
	// interval at which it will renew once it leads.
	Campaigning(key, name string, interval time.Duration)
	// Leading is called when this node announces leadership. waited is how
	// long it campaigned for it: since Start, or since its previous tenure
	// ended.
	Leading(key, name string, waited time.Duration)
	// Lost is called when leadership ends after tenure, for cause: an error
	// matching ErrRevisionGone, ErrRenewDeadline, ErrStopped or ErrHandedOver.
	Lost(key, name string, cause error, tenure time.Duration)
	// Renewed is called after each renewal with its round-trip time; err is
	// nil when the renewal was acknowledged.
	Renewed(key, name string, latency time.Duration, err error)
	// Stopped is called when the election stops campaigning.
	Stopped(key, name string)
}

// noMetrics is the Metrics of an election given none.
type noMetrics struct{}

func (noMetrics) Campaigning(string, string, time.Duration)    {}
func (noMetrics) Leading(string, string, time.Duration)        {}
func (noMetrics) Lost(string, string, error, time.Duration)    {}
func (noMetrics) Renewed(string, string, time.Duration, error) {}
func (noMetrics) Stopped(string, string)                       {}
