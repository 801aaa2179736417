package promelection

import (
	"errors"
	"fmt"
	"math"
)

// Default histogram bucket upper bounds, in seconds.
var (
	// defaultTenureBuckets span a leadership that lasted one second (a
	// flapping leader on a 2 s TTL) to a week, with steps at the TTLs an
	// election accepts (2 s to 1 h).
	defaultTenureBuckets = []float64{1, 5, 15, 30, 60, 300, 900, 1800, 3600, 3 * 3600, 6 * 3600, 12 * 3600, 86400, 7 * 86400}
	// defaultRenewLatencyBuckets span 100 µs to 5 s: a renewal takes about
	// 0.15 ms on one server and 0.5–0.6 ms on a 3-node cluster over loopback,
	// milliseconds across a network, and a KV call times out at 5 s at most.
	defaultRenewLatencyBuckets = []float64{0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5}
	// defaultAcquireBuckets span an uncontested win (milliseconds), the start
	// splay (up to 5 s), a takeover after expiry or a removal (up to one TTL,
	// at most 1 h), and a standby that waits while another node leads (days).
	defaultAcquireBuckets = []float64{0.01, 0.05, 0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600, 4 * 3600, 86400}
)

// ErrInvalidBuckets means histogram bucket bounds given to an option are
// empty, not finite and positive, or not in increasing order.
var ErrInvalidBuckets = errors.New("promelection: invalid histogram buckets")

// Option configures a Collector; pass options to NewCollector.
type Option func(o *options)

type options struct {
	tenureBuckets       []float64
	renewLatencyBuckets []float64
	acquireBuckets      []float64
}

// WithTenureBuckets sets the upper bounds, in seconds, of the
// tenure_seconds histogram. The default, 1 s to a week, is
// 1, 5, 15, 30, 60, 300, 900, 1800, 3600, 3 h, 6 h, 12 h, 1 d, 7 d.
func WithTenureBuckets(bounds []float64) Option {
	return func(o *options) { o.tenureBuckets = bounds }
}

// WithRenewLatencyBuckets sets the upper bounds, in seconds, of the
// renew_latency_seconds histogram. The default, 100 µs to 5 s, is
// 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
// 0.25, 0.5, 1, 2.5, 5.
func WithRenewLatencyBuckets(bounds []float64) Option {
	return func(o *options) { o.renewLatencyBuckets = bounds }
}

// WithAcquireBuckets sets the upper bounds, in seconds, of the
// acquire_seconds histogram. The default, 10 ms to a day, is
// 0.01, 0.05, 0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600, 4 h, 1 d.
func WithAcquireBuckets(bounds []float64) Option {
	return func(o *options) { o.acquireBuckets = bounds }
}

// checkBuckets returns an error naming the histogram and what is wrong with
// its bounds.
func checkBuckets(histogram string, bounds []float64) error {
	const allowed = "allowed: one or more finite positive bounds in increasing order"
	if len(bounds) == 0 {
		return fmt.Errorf("%w for %s: none given; %s", ErrInvalidBuckets, histogram, allowed)
	}
	for i, b := range bounds {
		if math.IsNaN(b) || math.IsInf(b, 0) || b <= 0 || i > 0 && b <= bounds[i-1] {
			return fmt.Errorf("%w for %s: %v; %s", ErrInvalidBuckets, histogram, bounds, allowed)
		}
	}
	return nil
}
