package election

import (
	"context"
	"fmt"
	"strings"
	"time"
)

// Resign asks the leader of key to stand down and let another candidate
// lead, and waits until a candidate claims the key or ctx is done. The
// leader writes a release, over which any other candidate claims the key
// and leads at once; it sits out for half a TTL, and if nobody else claimed
// by then it may lead again, which Resign reports with ErrNotTransferred.
// It returns ErrNoLeader if nobody holds the key, and ErrNotTransferred at
// once, without asking the leader, if no other candidate is listed for the
// key (see Candidates; one that runs WithoutPresence is not), or every
// other one's health check fails: the leader keeps leading.
func (b *Bucket) Resign(ctx context.Context, key string) (Leader, error) {
	return b.request(ctx, key, "")
}

// Transfer asks the leader of key to hand it to the candidate named to, and
// waits until another candidate holds the key or ctx is done. The leader
// writes a handoff naming to, which claims the key and leads at once; every
// other candidate, the old leader included, keeps away from the handoff for
// half a TTL. If to does not claim within that time, another candidate does,
// and Transfer returns that leader with ErrNotTransferred. It returns
// ErrNoLeader if nobody holds the key, ErrNotCandidate if to does not
// campaign for it, ErrNotTransferred at once if to's health check fails,
// and at once if to leads already.
func (b *Bucket) Transfer(ctx context.Context, key, to string) (Leader, error) {
	if err := CheckCandidate(to, key); err != nil {
		return Leader{}, err
	}
	return b.request(ctx, key, to)
}

func (b *Bucket) request(ctx context.Context, key, to string) (Leader, error) {
	if err := CheckKey(key); err != nil {
		return Leader{}, err
	}
	old, err := b.Leader(ctx, key)
	switch {
	case err != nil:
		return old, err
	case old.Name == "":
		return old, fmt.Errorf("%w: key %q of bucket %q", ErrNoLeader, key, b.kv.Bucket())
	case to != "" && old.Name == to:
		return old, nil
	case to != "":
		if err := b.requireCandidate(key, to); err != nil {
			return old, err
		}
	default:
		if err := b.requireOtherCandidate(key, old.Name); err != nil {
			return old, err
		}
	}
	value := requestValue(to)
	sub := b.watcher.subscribeLog(key) // before the request, so that no entry after it is missed
	defer b.watcher.unsubscribe(sub)
	rev, err := b.kv.Put(ctx, requestKey(key), []byte(value))
	if err != nil {
		return old, fmt.Errorf("key %q of bucket %q: writing the request: %w", key, b.kv.Bucket(), err)
	}
	now, err := b.awaitSuccessor(ctx, sub, rev, old.Name)
	switch {
	case err != nil:
		return now, fmt.Errorf("key %q of bucket %q: %w", key, b.kv.Bucket(), err)
	case to != "" && now.Name != to:
		return now, fmt.Errorf("%w: %s leads %q, not %s", ErrNotTransferred, now.Name, key, to)
	case to == "" && now.Name == old.Name:
		return now, fmt.Errorf("%w: %s took %q back, no other candidate having claimed it", ErrNotTransferred, now.Name, key)
	}
	return now, nil
}

// awaitSuccessor waits for the holder that claims the key after old gave it
// up: a claim after the request at revision rev by another candidate, or
// any claim after a release, handoff or removal written after the request
// (the old leader may claim again after sitting out).
func (b *Bucket) awaitSuccessor(ctx context.Context, sub *subscription, rev uint64, old string) (Leader, error) {
	given := false
	for {
		_, entries := b.watcher.takeEntries(sub)
		for _, ke := range entries {
			e := ke.entry
			v := keyView{ready: true}
			v.advance(e, time.Now())
			switch {
			case e == nil || e.Revision() > rev && !v.held():
				given = true
			case v.held() && (given || e.Revision() > rev && string(e.Value()) != old):
				return leaderOf(sub.key, &v), nil
			}
		}
		select {
		case <-ctx.Done():
			return Leader{Key: sub.key}, ctx.Err()
		case <-b.done:
			return Leader{Key: sub.key}, fmt.Errorf("%w: the bucket was closed", ErrStopped)
		case <-sub.changed:
		}
	}
}

// requireCandidate returns ErrNotCandidate unless to campaigns for key, and
// ErrNotTransferred if its health check fails.
func (b *Bucket) requireCandidate(key, to string) error {
	live := b.watcher.candidates(key, b.info.ttl)
	names := make([]string, len(live))
	for i, c := range live {
		switch {
		case c.Name == to && c.Unhealthy != "":
			return fmt.Errorf("%w: %q campaigns for key %q of bucket %q but its health check fails, so it would not claim the key: %s", ErrNotTransferred, to, key, b.kv.Bucket(), c.Unhealthy)
		case c.Name == to:
			return nil
		}
		names[i] = c.Name
	}
	if len(names) == 0 {
		return fmt.Errorf("%w: %q does not campaign for key %q of bucket %q, and nobody does", ErrNotCandidate, to, key, b.kv.Bucket())
	}
	return fmt.Errorf("%w: %q does not campaign for key %q of bucket %q; its candidates: %s", ErrNotCandidate, to, key, b.kv.Bucket(), strings.Join(names, ", "))
}

// requireOtherCandidate returns ErrNotTransferred unless a candidate other
// than leader, whose health check does not fail, campaigns for key: a
// resignation would only make the leader sit out and take the key back.
func (b *Bucket) requireOtherCandidate(key, leader string) error {
	failing := 0
	for _, c := range b.watcher.candidates(key, b.info.ttl) {
		switch {
		case c.Name != leader && c.Unhealthy == "":
			return nil
		case c.Name != leader:
			failing++
		}
	}
	if failing > 0 {
		return fmt.Errorf("%w: every other candidate of key %q of bucket %q (%d) fails its health check and would not claim it, so %s keeps leading",
			ErrNotTransferred, key, b.kv.Bucket(), failing, leader)
	}
	return fmt.Errorf("%w: no candidate but %s campaigns for key %q of bucket %q, so %s keeps leading; start another candidate first",
		ErrNotTransferred, leader, key, b.kv.Bucket(), leader)
}
