// Package election elects one leader among several processes through a key in
// a NATS JetStream Key-Value bucket with a TTL.
//
// Candidates watch the key. When it is free, each claims it with a
// compare-and-set on the revision it saw; the one that succeeds leads and
// renews the key once per campaign interval (75% of the TTL by default).
// If the leader stops renewing, the key ages out and another candidate's
// claim succeeds. Start campaigns until stopped, Once runs a job on one
// host, and a Bucket shares one watcher among many elections and observes,
// resigns and transfers leadership in any process. Beside it, package
// fleet places daemons across nodes, package history keeps who led when,
// and package promelection exports Prometheus metrics.
//
// # Guarantees
//
// IsLeader returns true on at most one node at any instant, and nothing a
// leadership started outlives its WorkDeadline, provided that:
//
//   - the bucket's compare-and-set is linearizable and keeps acknowledged
//     writes (run servers with sync_interval: always);
//   - the clocks keep the clock assumption: over any span, the monotonic
//     clocks of the candidates and the wall clocks of the bucket's servers
//     advance within ClockRate (5%) of each other, and the servers' wall
//     clocks agree within ServerClockOffset (100 ms); a suspended machine
//     is outside it (but see Clocks checked below);
//   - the bucket's TTL does not change while elections run on it.
//
// Every deadline derives from that assumption, the TTL and the campaign
// interval (TimingFor gives them). A leader stands down at its validity
// deadline, counted from when it sent its last successful write, on its
// monotonic clock, even if it is cut off or paused; the work it started
// must have stopped by its work deadline, still before the earliest moment
// any server can age the write out. And a winner announces leadership only
// once the previous holder must have stopped: at once over no entry (a key
// ages out only after that earliest moment) or over a holder's release,
// handoff or vouch; otherwise (a delete, a purge, an expiry marker) an
// announce delay after its claim. A leader writes its release, handoff or
// vouch only once OnWon has returned, so work that stops when its context is
// cancelled is handed over, never run twice. The leadership context is
// cancelled at the validity deadline; WorkDeadline says by when work outside
// the process must have stopped.
//
// # Non-guarantees
//
// Leadership is not mutual exclusion for side effects: a process paused
// between checking IsLeader and acting can act after a successor was
// announced. Pass the fencing token (TokenFromContext, or Token) to any
// resource you change and have it refuse tokens lower than the highest it
// has seen. Tokens grow only as long as JetStream keeps acknowledged writes
// and the bucket is not deleted and created again.
//
// A server whose wall clock steps forward by more than ServerClockOffset
// expires keys early. Do not purge the bucket's stream under running
// elections; delete keys instead. A process paused through its deadline sees
// its context cancelled only once it runs again.
//
// # Clocks checked
//
// An election checks its clock assumption while it runs, from data it
// already has, and acts on what it can prove:
//
//   - Suspend. The monotonic clock stops while a machine is suspended. On
//     Linux the election's clock reports the time slept (SuspendReporter:
//     CLOCK_BOOTTIME less CLOCK_MONOTONIC): IsLeader turns false the moment
//     the machine resumes, and the leader stands down at once (ErrSuspended)
//     and writes nothing on the strength of its lease. Elsewhere a suspend
//     goes unseen: a leader resumed from it may believe it leads until its
//     next renewal fails, and may vouch over its successor's claim.
//   - Clock rate. Each write's send and answer times, against the stream
//     leader's stamp on it, measure this node's clock rate against the
//     server's (EventClockRate, within bounds round trips cannot break):
//     past half of ClockRate the election warns, past ClockRate it refuses
//     to lead (ErrClockRate).
//   - Server clock offsets. A jump of the stamps between consecutive writes
//     beyond what round trips explain (a new stream leader whose clock is
//     off the old one's) is reported (EventClockJump), and warned of past
//     the offset the deadlines allow for (ErrClockOffset).
//
// What they cannot see: the clocks of the stream's other replicas, which age
// keys out by their own clocks but stamp nothing until one of them becomes
// the stream leader; and a server clock that steps and steps back between
// two writes of this node.
//
// The repository's docs hold the rest: docs/library.md (the API by task),
// docs/failover.md (the safety argument and failover times), docs/design.md
// (the protocol and its limits), docs/operations.md (running it, and the
// clocks), docs/benchmarks.md (what the chaos harness checks and measured).
package election
