package election

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// campaigner is the goroutine behind Start: it campaigns while a candidate and
// renews while it holds the key. It publishes what others may read (state,
// validity deadline, token) through the Election's fields under its mutex.
type campaigner struct {
	*Election
	callbacks *callbackQueue
}

// tenure is this node's hold on the key, from the Create that won it to
// stand-down.
type tenure struct {
	token      uint64      // revision of the winning Create: the fencing token
	revision   uint64      // latest revision this node wrote
	lastSent   time.Time   // when the latest acknowledged write was sent
	announceAt time.Time   // when leadership may be announced
	lead       *leadership // nil until leadership is announced
}

// leadership is an announced tenure: the context handed to OnWon, and the
// timer that cancels it at the validity deadline even if the campaigner is
// blocked in a KV call.
type leadership struct {
	ctx    context.Context
	cancel context.CancelFunc
	expiry *time.Timer
}

func (c *campaigner) run(ctx context.Context) {
	if !c.opts.noSplay && c.timing.maxSplay > 0 {
		if !sleep(ctx, rand.N(c.timing.maxSplay)) {
			return
		}
	}
	for {
		t, ok := c.campaign(ctx)
		if !ok {
			return
		}
		c.hold(ctx, t)
		if ctx.Err() != nil {
			return
		}
	}
}

// campaign tries to Create the key until it succeeds or ctx is done.
func (c *campaigner) campaign(ctx context.Context) (*tenure, bool) {
	for lost := 0; ; lost++ {
		c.notifyCampaign()
		sent := time.Now()
		// Stop does not cancel a write in flight: the server may apply it,
		// and only a finished write tells which revision to release.
		opCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.timing.opTimeout)
		rev, err := c.kv.Create(opCtx, c.key, []byte(c.name))
		cancel()
		if err == nil {
			announceAt := time.Now().Add(c.timing.announceDelay)
			c.log.Info("won the key; announcing after the announce delay",
				"revision", rev, "announce_delay", c.timing.announceDelay)
			return &tenure{token: rev, revision: rev, lastSent: sent, announceAt: announceAt}, true
		}
		if ctx.Err() != nil {
			return nil, false
		}
		if isCASConflict(err) {
			c.log.Debug("campaign lost", "error", fmt.Errorf("%w: %w", ErrKeyHeld, err))
		} else {
			c.log.Warn("campaign failed", "error", err)
		}
		if !sleep(ctx, c.campaignWait(lost)) {
			return nil, false
		}
	}
}

func (c *campaigner) campaignWait(lost int) time.Duration {
	if c.opts.backoff == nil {
		return c.timing.interval
	}
	return max(c.opts.backoff.Duration(lost), minCampaignWait)
}

// hold keeps the key for one tenure: it renews every interval, announces
// leadership once the announce delay has passed, and stands down when a
// renewal is refused, when the validity deadline passes, or when ctx is done.
func (c *campaigner) hold(ctx context.Context, t *tenure) {
	renewAt := t.lastSent.Add(c.timing.interval)
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		next := renewAt
		if t.lead == nil && t.announceAt.Before(next) {
			next = t.announceAt
		}
		timer.Reset(time.Until(next))
		select {
		case <-ctx.Done():
		case <-timer.C:
		}
		if ctx.Err() != nil { // checked again: select picks at random when both are ready
			c.standDown(t, ErrStopped)
			c.release(t)
			return
		}

		now := time.Now()
		if t.lead == nil && !now.Before(t.announceAt) && now.Before(c.deadline(t)) {
			c.announce(ctx, t)
		}
		if now.Before(renewAt) {
			continue
		}

		c.notifyCampaign()
		deadline := c.deadline(t)
		sent := time.Now()
		opCtx, cancel := context.WithDeadline(context.WithoutCancel(ctx), earliest(deadline, sent.Add(c.timing.opTimeout)))
		rev, err := c.kv.Update(opCtx, c.key, []byte(c.name), t.revision)
		cancel()
		switch {
		case err == nil:
			t.revision = rev
			if !c.extend(t, sent) {
				c.standDown(t, fmt.Errorf("%w: the renewal was acknowledged after it", ErrRenewDeadline))
				c.release(t)
				return
			}
			renewAt = sent.Add(c.timing.interval)
		case isCASConflict(err):
			c.standDown(t, fmt.Errorf("%w: %w", ErrRevisionGone, err))
			return
		case !time.Now().Before(deadline):
			c.standDown(t, fmt.Errorf("%w: %w", ErrRenewDeadline, err))
			c.release(t)
			return
		default:
			c.log.Warn("renewal failed; retrying until the validity deadline",
				"revision", t.revision, "error", err, "deadline_in", time.Until(deadline))
			renewAt = earliest(time.Now().Add(c.timing.renewRetry), deadline)
		}
	}
}

// deadline is the moment the tenure's validity ends unless renewed.
func (c *campaigner) deadline(t *tenure) time.Time {
	return t.lastSent.Add(c.timing.validity)
}

// announce makes this node the leader and runs OnWon.
func (c *campaigner) announce(ctx context.Context, t *tenure) {
	validUntil := c.deadline(t)
	leadCtx, cancel := context.WithCancel(context.WithValue(ctx, tokenKey{}, t.token))
	t.lead = &leadership{ctx: leadCtx, cancel: cancel, expiry: time.AfterFunc(time.Until(validUntil), cancel)}

	c.mu.Lock()
	c.state = LeaderState
	c.validUntil = validUntil
	c.token = t.token
	c.mu.Unlock()

	c.log.Info("leading", "revision", t.token)
	if c.opts.onWon != nil {
		c.callbacks.push(func() { c.opts.onWon(leadCtx) })
	}
}

// extend moves the validity deadline after a renewal sent at sent was
// acknowledged. It reports false if the old deadline passed first.
func (c *campaigner) extend(t *tenure, sent time.Time) bool {
	if t.lead != nil && !t.lead.expiry.Stop() {
		return false // the expiry timer fired: the leadership context is cancelled
	}
	validUntil := sent.Add(c.timing.validity)
	c.mu.Lock()
	ok := time.Now().Before(c.deadline(t))
	if ok && t.lead != nil {
		c.validUntil = validUntil
	}
	c.mu.Unlock()
	if !ok {
		return false
	}
	t.lastSent = sent
	if t.lead != nil {
		t.lead.expiry.Reset(time.Until(validUntil))
	}
	return true
}

// standDown ends the tenure: IsLeader turns false, then the leadership
// context is cancelled and OnLost is queued. A tenure that was never
// announced ends quietly.
func (c *campaigner) standDown(t *tenure, cause error) {
	if t.lead == nil {
		c.log.Info("gave up the key before announcing", "revision", t.revision, "cause", cause)
		return
	}
	c.mu.Lock()
	c.state = CandidateState
	c.validUntil = time.Time{}
	c.token = 0
	c.mu.Unlock()

	t.lead.expiry.Stop()
	t.lead.cancel()
	t.lead = nil
	c.log.Info("stood down", "revision", t.revision, "cause", cause)
	if c.opts.onLost != nil {
		c.callbacks.push(func() { c.opts.onLost(cause) })
	}
}

// release deletes the key if it still holds this node's latest revision, so
// that a candidate can take over without waiting for the key to expire.
func (c *campaigner) release(t *tenure) {
	ctx, cancel := context.WithTimeout(context.Background(), c.timing.opTimeout)
	defer cancel()
	if err := c.kv.Delete(ctx, c.key, jetstream.LastRevision(t.revision)); err != nil {
		c.log.Warn("could not release the key; it will expire", "revision", t.revision, "error", err)
		return
	}
	c.log.Info("released the key", "revision", t.revision)
}

func (c *campaigner) notifyCampaign() {
	if c.opts.onCampaign != nil {
		c.opts.onCampaign(c.State())
	}
}

// sleep waits for d or until ctx is done, and reports whether d passed.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

func earliest(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}
