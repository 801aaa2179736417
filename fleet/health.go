package fleet

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/kvelect/election"
	"github.com/kvelect/election/internal/healthloop"
)

// Health-checked daemons (Daemon.Health): the node runs each daemon's check
// every interval, and offers the daemon (lists it in its record's
// "daemons", which placement reads) only while the check passes. The
// verdict acts through placement and the node's own controller: a node
// that stops offering a daemon it runs revokes it at once, with a cause
// naming the check; the others read the changed record (every shortWait:
// a record's change shows no change of holder) and place the daemon on a
// node that offers it.

// daemonHealth is the verdict of one daemon's health check on this node.
type daemonHealth struct {
	checked bool  // a check returned
	offered bool  // a check passed, and fewer than failures failed since
	streak  int   // failed checks in a row
	last    error // the latest failure, while streak > 0
	// cause is the revocation cause of a daemon this node stopped offering
	// (nil while offered).
	cause error
}

// maxUnhealthyText bounds the reason a node's record gives for a daemon it
// does not offer.
const maxUnhealthyText = 256

// why says why a daemon is not offered, for the node's record.
func (h *daemonHealth) why() string {
	if !h.checked || h.last == nil {
		return "its health check has not passed yet"
	}
	text := fmt.Sprintf("%d failed health checks in a row: %v", h.streak, h.last)
	if len(text) > maxUnhealthyText {
		text = strings.ToValidUTF8(text[:maxUnhealthyText], "") + "…"
	}
	return text
}

// offersLocked reports whether the node offers daemon d: it has no health
// check, or its check passes.
func (n *Node) offersLocked(d string) bool {
	h := n.health[d]
	return h == nil || h.offered
}

// unhealthyLocked returns the daemons the node lists but does not offer,
// with why.
func (n *Node) unhealthyLocked() map[string]string {
	out := map[string]string{}
	for d, h := range n.health {
		if !h.offered {
			out[d] = h.why()
		}
	}
	return out
}

// ownMemberLocked returns the node's own record m with what it offers now,
// which its record in the bucket shows a round trip later.
func (n *Node) ownMemberLocked(m Member) Member {
	unhealthy := n.unhealthyLocked()
	m.Daemons = m.Daemons[:0:0]
	for _, d := range n.cfg.Daemons {
		if _, ok := unhealthy[d.Name]; !ok {
			m.Daemons = append(m.Daemons, d.Name)
		}
	}
	slices.Sort(m.Daemons)
	m.Unhealthy = nil
	if len(unhealthy) > 0 {
		m.Unhealthy = unhealthy
	}
	return m
}

// startHealthChecks starts the health check of each daemon that has one,
// until ctx is done.
func (n *Node) startHealthChecks(ctx context.Context) {
	for i := range n.cfg.Daemons {
		d := &n.cfg.Daemons[i]
		if d.Health == nil {
			continue
		}
		n.checks.Add(1)
		go func() {
			defer n.checks.Done()
			n.checkHealth(ctx, d)
		}()
	}
}

// checkHealth runs d's health check every interval until ctx is done, by
// the rules of healthloop.Run (one that has not returned within its
// interval failed, and fails again at each interval until it returns); a
// panic in it is a failure.
func (n *Node) checkHealth(ctx context.Context, d *Daemon) {
	check := func(ctx context.Context) error { return runSafely(ctx, d.Health) }
	healthloop.Run(ctx, nil, d.healthInterval(), check, func(err error, _ time.Duration) { n.noteHealth(d, err) })
}

// noteHealth records the result of one of d's health checks. When it
// changes what the node offers, the node's record is rewritten and the
// controller woken: it revokes a daemon no longer offered, and claims one
// offered again as placement says.
func (n *Node) noteHealth(d *Daemon, err error) {
	n.mu.Lock()
	h := n.health[d.Name]
	first := !h.checked
	was := h.offered
	h.checked = true
	if err == nil {
		h.streak, h.last = 0, nil
		h.offered, h.cause = true, nil
	} else {
		h.streak++
		h.last = err
		if h.offered && h.streak >= d.healthFailures() {
			h.offered = false
			h.cause = fmt.Errorf("%w: %w: %d checks of daemon %q failed in a row on node %q (every %v): %w",
				ErrRevoked, election.ErrHealthCheck, h.streak, d.Name, n.cfg.Name, d.healthInterval(), err)
		}
	}
	offered, streak := h.offered, h.streak
	changed := offered != was || (first && !offered)
	if changed {
		// Under n.mu, so that two daemons' changes publish in order.
		if err := n.self.SetMetadata(n.cfg.metadata(n.unhealthyLocked())); err != nil {
			n.log.Error("publishing the daemons this node offers", "error", err)
		}
		if m, ok := n.members[n.cfg.Name]; ok {
			n.members[n.cfg.Name] = n.ownMemberLocked(m)
		}
		n.placeNodes, n.placeable = nil, nil
		n.lastChange = time.Now()
	}
	n.mu.Unlock()
	switch {
	case offered && !was:
		n.log.Info("the daemon's health check passes: offering the daemon", "daemon", d.Name)
	case was && !offered:
		n.log.Warn("the daemon's health check failed too often: no longer offering the daemon; it moves to a node that offers it",
			"daemon", d.Name, "failures", streak, "interval", d.healthInterval(), "error", err)
	case first && !offered:
		n.log.Warn("the daemon's health check fails: not offering the daemon until it passes", "daemon", d.Name, "error", err)
	case err != nil:
		n.log.Debug("the daemon's health check failed", "daemon", d.Name, "failures", streak, "error", err)
	}
	if changed {
		n.notify()
	}
}

// rereadCheckedLocked reads again the records of the members with
// health-checked daemons, whose records change while they are members,
// and reports whether what one offers changed.
func (n *Node) rereadCheckedLocked(ctx context.Context) bool {
	changed := false
	for name, m := range n.members {
		if !m.checked || name == n.cfg.Name {
			continue
		}
		now, ok := readMember(ctx, n.bucket, name)
		if !ok || (slices.Equal(now.Daemons, m.Daemons) && maps.Equal(now.Unhealthy, m.Unhealthy)) {
			continue
		}
		n.members[name] = now
		changed = true
	}
	if changed {
		n.placeNodes, n.placeable = nil, nil
		n.lastChange = time.Now()
	}
	return changed
}

// anyCheckedLocked reports whether a member has health-checked daemons.
func (n *Node) anyCheckedLocked() bool {
	for _, m := range n.members {
		if m.checked {
			return true
		}
	}
	return false
}
