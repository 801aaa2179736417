package election

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// A leader that sees its key removed (deleted, purged, overwritten) stands
// down at once, but its work may take a while to stop: a command given
// SIGTERM, a daemon that drains. Its release, over which the next winner
// announces at once, must wait for that work (campaigner.awaitWork). So that
// candidates neither claim over the removal meanwhile (a claim over a
// removal waits out the announce delay, about a TTL) nor wait a fixed
// window, the leader answers the removal at once, by compare-and-set over
// it, with a draining mark: "draining:" and its name, " for " and how long
// until its last write's earliest expiry (hardEnd): after its work deadline
// (WorkDeadline, by when its work has stopped, whatever it does, a guard
// killing what did not), with the same slack for the kill to take effect as
// an expiry leaves. It writes its release over the mark once the work has
// returned, and candidates claim over the release at once; if none comes,
// they claim over the mark once outlast of the time it names has passed
// since they saw it, and announce at once then too: the work has stopped by
// then.
//
// Only a node that may vouch writes the mark (campaigner.vouch says why):
// the announced leader, within its validity, when it saw the removal. The
// mark's format is in wire.go.

// drainedAt is when a candidate may claim over v's latest entry, a draining
// mark seen at v.seenAt: once the time it names has surely passed. The
// time left was read before the mark was sent, and seenAt is when this
// node's watcher delivered it, later: the wait's only slack is that gap, so
// seenAt must never be earlier than the delivery. A mark
// that cannot be read counts as naming the longest time any leader's work
// can have left, the earliest expiry.
func (c *campaigner) drainedAt(v *keyView) time.Time {
	left, ok := drainingLeft(v.latest.Value())
	if !ok || left > c.e.timing.hardEnd {
		left = c.e.timing.hardEnd
	}
	return v.seenAt.Add(outlast(left))
}

// markDraining writes this node's draining mark over revision removal,
// which another client wrote over its tenure t, and returns the revision
// written, 0 if the key moved on first.
func (c *campaigner) markDraining(t *tenure, removal uint64) uint64 {
	ctx, cancel := context.WithTimeout(context.Background(), c.e.timing.opTimeout)
	defer cancel()
	left := t.lastSent.Add(c.e.timing.hardEnd).Sub(c.e.now())
	sent := c.e.now()
	rev, err := c.kv.Update(ctx, c.e.key, []byte(drainingValue(c.e.name, left)), removal)
	c.roundTrip(sent, err)
	if err != nil {
		c.e.log.Debug("could not mark the key draining; the next leader waits a TTL", "removal", removal, "error", err)
		return 0
	}
	c.watcher.wrote(rev)
	c.e.log.Info("stood down; marked the key draining until the work returns", "removal", removal, "revision", rev, "left", left)
	return rev
}

// drainedBy names the writer of a draining mark, for the history.
func drainedBy(over jetstream.KeyValueEntry) string {
	return fmt.Sprintf("drained by %s", drainingName(over.Value()))
}
