package election

import (
	"fmt"
	"time"
)

// Hard limits on an election's timing, checked by NewElection.
//
// They bound liveness, not safety: safety comes from the clock assumption
// and the deadlines derived from it (timing.go), which scale with the TTL. The figures they rest on were measured on nats-server 2.15.2
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
// At MinTTL with the default interval, a leader has 155 ms to retry a failed
// renewal, and its work a further 116 ms to stop, before the 190 ms the
// clock assumption keeps: each well above a renewal round trip. etcd's
// smallest lease is also 2 s.
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
	// MinIntervalGap is the smallest gap between the campaign interval and
	// the earliest moment a leader's write can age out under the clock
	// assumption, (TTL − ServerClockOffset)/(1 + ClockRate): 1.81 s at the
	// 2 s floor, so an interval of up to 1.51 s there. Half of the gap is the
	// leader's window to retry a failed renewal, the rest its work's time to
	// stop after it stands down.
	MinIntervalGap = 300 * time.Millisecond
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
	if most := hardEnd(ttl) - minGap; interval > most {
		return fmt.Errorf("%w: campaign interval %v at bucket TTL %v: allowed at most %v (%v before a write can age out under the clock assumption)",
			ErrInvalidArgument, interval, ttl, most.Truncate(time.Millisecond), minGap)
	}
	return nil
}
