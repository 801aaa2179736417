// Package endpoint serves a NATS subject only while an election leads: a
// request sent to the subject reaches the leader, whoever it is, with no
// need to ask who leads first and no race with a handover in between.
//
// An Endpoint is a NATS micro service (github.com/nats-io/nats.go/micro)
// with one endpoint, added by Serve, called from the election's OnWon with
// the leadership context, and removed when that context ends; nats micro
// ls, info and stats list it on the leader alone. Forward makes a Handler
// that passes each request on to an HTTP application, as election sidecar
// --serve and election run --serve do.
//
//	ep, err := endpoint.New(nc, endpoint.Config{Subject: "svc.report", Handler: h})
//	e, err := b.NewElection("pod-a", "reports", election.OnWon(func(leading context.Context) {
//		ep.Serve(leading) // returns once leadership has ended and the endpoint has stopped
//	}))
//
// # Guarantees
//
//   - Every reply carries the leadership's fencing token in the
//     Fencing-Token header (election.TokenHeader), error replies too.
//   - A reply is sent only while the leadership lasts: a handler that
//     returns after the leadership context has ended, or after the
//     leadership's validity deadline has passed on this process's clock
//     (a process paused through it, before its election has seen it), has
//     its reply dropped; requests delivered then (buffered while the
//     process was paused) are dropped without calling the handler. The
//     requester times out and retries, and reaches the next leader.
//   - The subscription is in a queue group (Config.QueueGroup, "kvelect"
//     by default): if two ever coexist at the server (a paused ex-leader's
//     connection lingers there until the server's ping timeout while the
//     next leader subscribes), the server delivers each request to one of
//     them only. With the rule above, a request gets at most one reply.
//   - Serve returns only once the endpoint has stopped: the subscription is
//     drained and its unsubscribe confirmed by the server (a flush), and
//     the handler running has returned, or else once the leadership's work
//     deadline (election.WorkDeadline) has passed. An election releases its
//     key only after OnWon returns, and a successor leads only after the
//     work deadline otherwise, so the next leader's endpoint never serves
//     beside this one's.
//
// A handler's context is done at the leadership's work deadline, not when
// leadership ends: work a request started may finish until then, but its
// reply is dropped once leadership has ended. A handler still running at
// the work deadline is not waited for; its reply is never sent.
//
// # Clocks and suspend
//
// The endpoint waits for the work deadline with Go's timers, counting from
// time.Now: it assumes the election reads the machine's clock, as it does
// unless it was opened with a clock of its own (election.WithClock, for
// tests), whose deadlines these timers would misread. Go's timers run on
// the monotonic clock, which on Linux stands still while the machine is
// suspended, so after a suspend they would reach the work deadline late by
// the length of the sleep, while a successor may lead. The election sees
// the suspend on Linux within about 100 ms of resuming and ends the
// leadership with election.ErrSuspended; the handler's context is then
// done at once, with that cause (context.Cause(ctx) matches
// election.ErrSuspended), its reply is dropped, and Serve stops the
// endpoint without waiting for it. A handler still draining after its
// leadership ended for another cause has its context done within 10 ms of
// a resume too (election.SleptSince). On other systems a suspend goes
// unseen (see the election package's documentation).
//
// # Non-guarantees
//
// A request is handled at most once per leadership, not exactly once: a
// request whose reply was dropped, or lost on the way, may have had its
// effect, and its retry reaches the next leader. Make requests idempotent,
// or fence what they change with the token. The handler runs one request
// at a time, in the order the server delivered them.
//
// # Callers
//
// When no leader serves (between a leader's end and the next one's start,
// milliseconds after a stand-down, about a TTL after a crash) a request
// fails at once with nats.ErrNoResponders. When a leadership ends while a
// request is in flight, the request times out. Retry both, with a backoff,
// until a deadline of your own:
//
//	for attempt := 0; ; attempt++ {
//		msg, err := nc.Request("svc.report", data, time.Second)
//		if err == nil {
//			return msg, nil // msg.Header.Get("Fencing-Token") is the leader's token
//		}
//		if !errors.Is(err, nats.ErrNoResponders) && !errors.Is(err, nats.ErrTimeout) {
//			return nil, err
//		}
//		time.Sleep(50 * time.Millisecond << min(attempt, 5))
//	}
//
// docs/endpoints.md describes the commands and the permissions.
package endpoint
