package sim

import (
	"context"
	"errors"
	"fmt"
	"time"

	election "github.com/kvelect/election"
	"github.com/kvelect/election/fleet"
)

// A schedule's fleet: its candidates with a Bucket join a fleet (package
// fleet, on that Bucket) that runs Schedule.Daemons daemons. Each daemon's
// work runs from its start until its context ends, and returns the node's
// DaemonDelay later (within fleet.LossMargin, which a daemon must keep to
// when its node loses it). Its intervals are checked as a key's works are:
// never two at once (no daemon on two nodes), tokens increasing; and each
// daemon runs somewhere at the end of the run.

// daemonName is the name of daemon d.
func daemonName(d int) string { return fmt.Sprintf("d%d", d) }

// daemonKey is the key index of daemon d: after the Start keys and the
// Once key.
func (s Schedule) daemonKey(d int) int { return s.StartKeys + 1 + d }

// joinFleet joins the candidate's node to the fleet on b, retrying while
// its link is cut, until it is a member or ctx ends; it then keeps the
// node until halt leaves it.
func (c *cand) joinFleet(ctx context.Context, b *election.Bucket) {
	var daemons []fleet.Daemon
	for d := range c.w.s.Daemons {
		daemons = append(daemons, fleet.Daemon{Name: daemonName(d), Run: func(ctx context.Context) error { return c.daemon(ctx, d) }})
	}
	for ctx.Err() == nil {
		n, err := fleet.Join(ctx, b, fleet.Config{Name: name(c.i), Daemons: daemons})
		if err == nil {
			c.mu.Lock()
			c.node = n
			c.mu.Unlock()
			c.w.rec.decided("%s joined the fleet", name(c.i))
			return
		}
		if errors.Is(err, fleet.ErrInvalidConfig) {
			panic(err) // the simulation makes none
		}
		c.w.rec.decided("%s could not join the fleet: %v", name(c.i), err)
		sleep(ctx, c.w.s.stretch(200*time.Millisecond))
	}
}

// daemon is the work of daemon d on the candidate's node.
func (c *cand) daemon(ctx context.Context, d int) error {
	token, _ := election.TokenFromContext(ctx)
	key := c.w.s.daemonKey(d)
	id := c.w.rec.begin(key, c.i, token, false)
	c.w.rec.decided("%s runs daemon %s with token %d", name(c.i), daemonName(d), token)
	<-ctx.Done()
	c.w.rec.cancel(id)
	time.Sleep(c.clock.Real(c.spec.DaemonDelay))
	c.w.rec.end(id)
	return nil
}
