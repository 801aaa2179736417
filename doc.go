// Package election elects one leader among several processes through a key in
// a NATS JetStream Key-Value bucket with a TTL.
//
// Candidates watch the key. When it is free (absent, deleted, purged, or
// released by its holder) each claims it with a compare-and-set on the
// revision it saw; the one that succeeds holds the key and renews it with a
// revision-checked Update once per campaign interval (default 75% of the
// TTL). If the holder stops renewing, the key expires and a candidate's claim
// succeeds. While the holder renews, waiting candidates write nothing.
//
// # Guarantees
//
// IsLeader returns true on at most one node at any instant, provided that:
//
//   - the bucket's compare-and-set is linearizable and keeps acknowledged
//     writes (run servers with sync_interval: always; see docs/design.md);
//   - the monotonic clocks of the candidates and the servers' wall clocks run
//     at rates within (TTL−interval)/(2·TTL) of each other (12.5% at the
//     default interval);
//   - the bucket's TTL does not change while elections run on it: each
//     candidate reads it once, in NewElection or OpenBucket.
//
// Two rules give this. A leader stands down by itself once
// interval + (TTL−interval)/2 has passed since it sent its last successful
// write, measured on its monotonic clock, even if it is cut off from the
// server or paused: IsLeader turns false at that moment. And a winner
// announces leadership only once the previous holder must have stood down:
// at once when its claim found no entry at all (the server removes a key
// only a TTL after its last write, on buckets without per-message TTLs or
// discard-old limits) or a holder's release or handoff (written after
// standing down and after its own announce time); otherwise (a delete, a
// purge or an expiry marker, which the watcher cannot tell from an early
// removal) one full TTL after its claim was acknowledged, and only once a
// renewal sent at that moment is acknowledged.
//
// A leader that sees another client delete, purge or overwrite its key while
// it leads (within its deadline) stands down and vouches for it: it writes
// its release by compare-and-set over that write, and the next winner
// announces at once over the release. Candidates wait a short vouch window
// after a removal (TTL/20, at most 250 ms) for it. docs/failover.md in the
// repository gives the argument.
//
// A leader writes its release, handoff or vouch only once its OnWon callback
// has returned (or the key is about to expire anyway), so a successor that
// leads at once over a handover never starts while the old leader's work in
// OnWon still runs: work that stops when its context is cancelled is handed
// over, never run twice.
//
// The leadership context handed to OnWon is cancelled by a timer at that same
// deadline, so it can lag by scheduling delay; the (TTL−interval)/2 margin
// covers such delays (the chaos harness measures them), but not a pause: a
// process stopped through its deadline sees the context cancelled only once
// it runs again.
//
// # Non-guarantees
//
// Leadership is not mutual exclusion for side effects: a process paused
// between checking IsLeader and acting can act after a successor was
// announced. Pass the fencing token (TokenFromContext, or Token) to any
// resource you change and have it refuse tokens lower than the highest it has
// seen. Tokens grow only as long as JetStream keeps acknowledged writes and
// the bucket is not deleted and created again.
//
// The announce-at-once rule for a key that aged out trusts the server's
// clock: a server whose wall clock steps forward expires keys early. Do not
// purge the bucket's stream (nats stream purge, or nats kv compact) under
// running elections; delete keys instead.
//
// The monotonic clock does not advance while the machine is suspended; a
// leader resumed from system suspend may believe it leads until its next
// renewal fails.
//
// # Timing
//
// With TTL T and campaign interval I, a crashed leader's key expires T after
// its last renewal, so between T−I and T after the crash (plus about 0.25 s of
// server expiry lag on file storage). Candidates claim it a TTL after the
// last renewal they saw and retry until it is gone, and the winner announces
// at once. A leader that stops gracefully releases its key, and a watching
// candidate wins and announces within a few round trips. After a delete,
// purge or overwrite by another client that the leader saw, the next leader
// announces within a few round trips of the vouch; if the leader was cut off,
// a candidate wins after the vouch window and announces T later. With expiry
// markers on the bucket (LimitMarkerTTL) an expired key leaves a marker that
// counts as a removal, so the winner waits T.
//
// # Jobs that run once
//
// Election.Once makes one attempt: if the key is free and the candidate wins,
// it runs a function with the leadership context and marks the key done for a
// TTL, so that the same job fired on many hosts (cron) runs on one of them.
//
// # Many elections, observers and requests
//
// Elections made from one Bucket (OpenBucket) share a single watcher,
// however many keys they use; one made by NewElection alone watches its own
// key. A watcher that stalls (its server died) or misses a write of this
// process is replaced, and the new one's state replaces what the old one
// showed. Bucket.Observe reports the changes of holder of a key,
// Bucket.Leader and Bucket.Leaders the current holders, and Bucket.Resign
// and Bucket.Transfer ask a key's leader, in whatever process, to hand the
// key to any other candidate or to a named one.
//
// # Candidates and priorities
//
// Every running election keeps a record of its candidacy in the bucket
// (unless made WithoutPresence), so Bucket.Candidates lists who campaigns
// for a key in any process, and a transfer to a name that does not is
// refused. WithPriority makes a free key go to the highest live priority
// first (0 never leads), and WithPreferHigher makes a leader hand the key to
// a higher priority once it has been listed for a while. The records and
// priorities decide who claims first, never who leads at an instant.
package election
