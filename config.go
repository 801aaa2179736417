package election

import (
	"log/slog"
	"time"
)

// An election's configuration is made in two steps, each in one place:
// resolveOptions applies the options and fills every default, and
// checkOptions checks the result against the limits. NewElection,
// Bucket.NewElection (through newElection) and OpenBucket call
// resolveOptions once each; nothing after them fills a default.

// defaultInterval is the campaign interval of an election on a bucket of
// the given TTL made without WithCampaignInterval: three quarters of the
// TTL.
func defaultInterval(ttl time.Duration) time.Duration { return ttl * 3 / 4 }

// defaultTiming is the timing of an election at the default interval.
func defaultTiming(ttl time.Duration) timing { return newTiming(ttl, defaultInterval(ttl)) }

// resolveOptions applies opts, in order, and fills the defaults of what
// they leave unset, for an election on a bucket of the given TTL: the
// campaign interval (defaultInterval), the priority (DefaultPriority), the
// readiness time of WithPreferHigher (two TTLs), the clock (the machine's)
// and the logger (one that discards). It checks nothing: see checkOptions.
func resolveOptions(opts []Option, ttl time.Duration) options {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	if o.interval == 0 {
		o.interval = defaultInterval(ttl)
	}
	if !o.prioritySet {
		o.priority = DefaultPriority
	}
	if o.readyFor == 0 {
		o.readyFor = 2 * ttl
	}
	if o.clock == nil {
		o.clock = machineClock{}
	}
	if o.logger == nil {
		o.logger = slog.New(slog.DiscardHandler)
	}
	return o
}

// checkOptions returns the error NewElection gives for options resolved by
// resolveOptions, with t derived from them: the limits on the TTL and the
// interval, then the priorities, then the health check, then the metadata.
func checkOptions(o *options, t timing) error {
	if err := checkLimits(t.ttl, t.interval, o.unsafeShorter); err != nil {
		return err
	}
	if err := o.checkPriority(); err != nil {
		return err
	}
	if err := checkHealthConfig(o.health); err != nil {
		return err
	}
	return checkMetadata(o.metadata, o.noPresence)
}
