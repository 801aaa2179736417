package cli

import (
	"time"

	"github.com/kvelect/election"
)

// renewalLimits returns the ages of a leader's latest write (claim or
// renewal) past which its renewal is late and its leadership has lapsed, on
// a bucket with the given TTL, for a leader renewing every interval (0: the
// default, three quarters of the TTL). They are election check's WARNING
// and CRITICAL and the dashboard's late and lapsed; KvelectRenewalsSlow in
// deploy/prometheus/kvelect-rules.yml fires at the same point (a renewal
// slower than late − interval), which TestRulesRenewalThresholdIsRenewalLimits
// checks.
//
// With I the interval, E the earliest moment a server can age the write
// out and G = E − I: a leader sends its renewal I after its previous write
// was sent, and a renewal not acknowledged is retried until Validity =
// I + G/2, when the leader stands down. The write's age by the server's
// clock exceeds I only by how much later the renewal reached the server
// than the previous write did, plus the leader's clock rate: milliseconds.
// Late is I + G/4, halfway through the retry window: at least 75 ms past I
// (G is at least MinIntervalGap), 229 ms at a 5 s TTL, 482 ms at 10 s. A
// renewal missing then has failed or is stuck. Lapsed is Validity: past it
// the leader no longer leads by its own clock, though the key names it
// until it ages out.
func renewalLimits(ttl, interval time.Duration) (late, lapsed time.Duration) {
	t := election.TimingFor(ttl, interval)
	return t.Interval + (t.EarliestExpiry-t.Interval)/4, t.Validity
}
