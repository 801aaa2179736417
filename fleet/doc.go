// Package fleet runs daemons, named units of background work, across the
// nodes of a fleet: each daemon on exactly one live node that can run it,
// spread by capacity, moved when its node leaves or dies. It is built on
// the election package's public API: a fleet is an election bucket.
//
// # Membership
//
// A node joins (Join) under a stable name, unique in the fleet (a second
// live node of a name is refused with ErrNameTaken), with a capacity,
// labels, a version and the daemons it can run. It is a member while it leads the
// election key "fleet.node.<name>", and publishes its description in that
// election's candidate record. Every process sees the members and their
// joins and leaves without polling (WatchMembers, ReadStatus). A node that
// leaves gracefully (Leave) is gone at once; one that crashed or was cut
// off is gone a TTL after its last renewal reached the servers (plus the
// server's expiry lag, about 250 ms on file storage). A node cut off from
// the servers stops counting itself a member at its own renewal deadline
// (IsMember), before the others can see it gone.
//
// # Daemons
//
// The right to run a daemon is an election on the key "fleet.daemon.<name>",
// and the daemon runs only under that election's leadership context, with
// its fencing token (election.TokenFromContext). Placement (who claims a
// free daemon first, and which daemons a node gives away) is only a policy
// that every node computes from what its bucket's watcher shows: with
// equal capacities each node runs ⌊D/N⌋ or ⌈D/N⌉ daemons; a join moves only
// the excess and a leave only the leaver's daemons. Placement never decides
// who runs a daemon at an instant; the election does.
//
// # Priorities
//
// A node's Config.Priority (0, the default, or more) ranks it: each daemon
// starts only on the live nodes of the highest priority among those that can
// run it, spread over them as above, and falls back to lower priorities
// when none of those is live. A daemon that a node of lower priority runs
// when a higher one joins stays there until that node leaves, unless the
// node set Config.PreferHigher: then it hands the daemon over as a join
// moves a node's excess, drain first. Priorities act through placement
// alone: every fleet election campaigns at the same election priority,
// whatever the bucket's default options say.
//
// # Health checks
//
// A daemon may have a health check (Daemon.Health), which each node that
// lists the daemon runs every HealthInterval whether or not it runs it. A
// node offers the daemon to placement (Member.Daemons) only once its check
// passed, and stops offering it after HealthFailures failures in a row:
// then, if it runs the daemon, it revokes it at once, with a cause
// matching ErrRevoked and election.ErrHealthCheck that has the check's
// error, and the daemon moves, drain first, to a node that offers it,
// within HealthInterval × HealthFailures of the first failing check plus
// the drain. A node whose check passes again offers the daemon again; a
// daemon whose check fails on every node runs nowhere until one passes.
//
// # Guarantees
//
// A daemon never runs on two nodes at once, under the election package's
// conditions, provided that it returns once its context is cancelled:
//
//   - To move a daemon, its node cancels the daemon's context with cause
//     ErrRevoked and keeps holding and renewing the daemon's key until the
//     daemon has returned; only then does it release the key, over which the
//     next node starts the daemon at once. A daemon still running after its
//     drain timeout is let go anyway: its key is left to age out, and the
//     next node starts it a TTL after the node's last renewal.
//   - A node that loses a daemon's key (cut off from the servers, or the
//     key was removed) has its context cancelled at its validity deadline,
//     which comes LossMargin (723 ms at a 10 s TTL) before its work
//     deadline, the last moment before the key can age out under the
//     election's clock assumption: the daemon must return within it.
//
// A daemon that returns before its context is cancelled, with an error or
// a panic, is started again after a backoff.
//
// # Non-guarantees
//
// A daemon that ignores its context past these bounds can overlap its next
// run on another node: pass the fencing token to what the daemon changes.
// Placement spreads daemons from each node's view; views that differ for a
// moment (a burst of joins) can move a daemon more than once before the
// fleet settles, never to two nodes at once.
package fleet
