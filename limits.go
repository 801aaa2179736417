package election

import (
	"fmt"
	"time"
)

// Hard limits on an election's timing, checked by NewElection.
//
// They bound liveness, not safety: safety comes from the announce delay and
// the leader's validity deadline (see the package documentation), which scale
// with the TTL. The figures they rest on were measured on nats-server 2.15.2
// (see docs/design.md, "Limits"):
//
//   - A file-storage bucket expires a key about 250 ms after its TTL (the server
//     checks ages on a 250 ms timer against a clock cached every 100 ms); memory
//     storage within about 10 ms. Expiry is never early (TestKeysNeverExpireEarly
//     in integration/).
//   - A revision-checked Update takes about 0.15 ms on a single server and
//     0.5–0.6 ms on an in-process 3-node cluster's R3 bucket, on loopback
//     (BenchmarkRenew in integration/).
//
// At MinTTL with the default interval, a leader has 250 ms to retry a failed
// renewal and keeps a further 250 ms margin against clock-rate differences
// and scheduling delay: each well above a renewal round trip. etcd's smallest
// lease is also 2 s.
const (
	// MinTTL is the smallest bucket TTL an election accepts.
	MinTTL = 2 * time.Second
	// MaxTTL is the largest bucket TTL an election accepts. A crashed leader
	// holds the key for up to one TTL, so beyond an hour an election is no
	// longer a failover mechanism.
	MaxTTL = time.Hour
	// MinCampaignInterval is the shortest campaign interval: a leader writes
	// once per interval.
	MinCampaignInterval = time.Second
	// MinIntervalGap is the smallest gap between the campaign interval and the
	// TTL. Half of the gap is the leader's window to retry a failed renewal,
	// the other half its safety margin before the key can expire.
	MinIntervalGap = 500 * time.Millisecond
)

// Floors that apply instead of the limits above with WithUnsafeShortTTL:
// the smallest bucket TTL nats-server accepts, and durations small enough for
// tests and the chaos harness.
const (
	unsafeMinTTL              = 100 * time.Millisecond
	unsafeMinCampaignInterval = 10 * time.Millisecond
	unsafeMinIntervalGap      = 10 * time.Millisecond
)

// ttlProblem says what is wrong with a bucket TTL outside the range an
// election accepts (with unsafeShort, down to the server's own minimum),
// naming the value and the range; "" if nothing is.
func ttlProblem(ttl time.Duration, unsafeShort bool) string {
	minTTL := MinTTL
	if unsafeShort {
		minTTL = unsafeMinTTL
	}
	if ttl < minTTL || ttl > MaxTTL {
		return fmt.Sprintf("bucket TTL %v, allowed %v to %v", ttl, minTTL, MaxTTL)
	}
	return ""
}

// checkLimits returns an error naming the limit broken and the value given.
func checkLimits(ttl, interval time.Duration, unsafeShort bool) error {
	minInterval, minGap := MinCampaignInterval, MinIntervalGap
	if unsafeShort {
		minInterval, minGap = unsafeMinCampaignInterval, unsafeMinIntervalGap
	}
	if p := ttlProblem(ttl, unsafeShort); p != "" {
		return fmt.Errorf("%w: %s", ErrBucketConfig, p)
	}
	if interval < minInterval {
		return fmt.Errorf("%w: campaign interval %v is below the minimum %v", ErrInvalidArgument, interval, minInterval)
	}
	if ttl-interval < minGap {
		return fmt.Errorf("%w: campaign interval %v must be at most bucket TTL %v − %v",
			ErrInvalidArgument, interval, ttl, minGap)
	}
	return nil
}
