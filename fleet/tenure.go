package fleet

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/kvelect/election"
)

// tenure is this node's campaign for one daemon and, once it wins, its run
// of the daemon: an election on the daemon's key, whose leadership context
// the daemon runs under. The daemon's key is let go (the election stopped,
// which releases it) only after the daemon has returned or its drain
// timeout has passed, so the next node starts it only then.
type tenure struct {
	node   *Node
	daemon *Daemon
	e      *election.Election
	log    *slog.Logger

	mu       sync.Mutex
	st       DaemonStatus
	stop     context.CancelCauseFunc // cancels the daemon's run; set while it runs
	end      context.CancelCauseFunc // cancels the election's Start, with why the daemon was let go (its stand-down cause)
	cause    error                   // why the daemon was revoked (revokeFor), for the election's stand-down
	stopping bool                    // the election is being stopped
	over     bool                    // the election has stopped: the tenure is over
}

// claim starts a tenure for daemon d: an election on its key, which claims
// it when it is free.
func (n *Node) claim(d string) (*tenure, error) {
	t := &tenure{node: n, daemon: n.daemons[d], log: n.log.With("daemon", d)}
	t.st = DaemonStatus{Name: d, Node: n.cfg.Name, State: Assigning, Since: time.Now()}
	e, err := n.bucket.NewElection(n.cfg.Name, daemonKey(d),
		election.WithoutSplay(),
		fleetPriority,
		election.WithMetadata(t.st.metadata()),
		election.WithLogger(t.log),
		election.OnWon(t.run),
		election.OnLost(t.lost),
	)
	if err != nil {
		return nil, err
	}
	t.e = e
	ctx, end := context.WithCancelCause(context.Background())
	t.end = end
	go func() {
		defer end(nil)
		if err := e.Start(ctx); err != nil {
			t.log.Error("daemon election", "error", err)
		}
		t.mu.Lock()
		t.over = true
		t.mu.Unlock()
		n.notify()
	}()
	t.log.Debug("campaigning for the daemon")
	return t, nil
}

// run is the election's OnWon: it runs the daemon, starting it again after
// a backoff each time it returns by itself, until the leadership context
// is cancelled (leadership lost) or the tenure is revoked. It returns only
// once the daemon has returned, and the election lets the key go only then.
func (t *tenure) run(lead context.Context) {
	ctx, stop := context.WithCancelCause(context.WithValue(lead, holdKey{}, lead))
	defer stop(nil)
	token, _ := election.TokenFromContext(lead)
	t.mu.Lock()
	if t.stopping { // won while being stopped: let it go at once
		t.mu.Unlock()
		return
	}
	t.stop = stop
	t.st.State, t.st.Token, t.st.Since = Running, token, time.Now()
	t.publishLocked()
	t.mu.Unlock()
	t.log.Info("running the daemon", "token", token)
	t.node.notify()

	runDaemon(ctx, t.daemon, t.log, func(err error) {
		t.mu.Lock()
		t.st.Restarts++
		t.st.Restarted = time.Now()
		if err != nil {
			t.st.LastError = err.Error()
		}
		t.publishLocked()
		t.mu.Unlock()
	})
	t.log.Info("the daemon returned", "token", token, "cause", context.Cause(ctx))
	t.mu.Lock()
	t.stop = nil
	t.mu.Unlock()
	t.stopElection() // a revoked daemon lets its key go now; a lost one ends its campaign
}

// holdKey is the key of the daemon's hold (its leadership context) in the
// context Run gets.
type holdKey struct{}

// DrainContext returns the context a revoked daemon finishes its work
// under. Run's ctx is cancelled with ErrRevoked as soon as the daemon is
// to move, but the node keeps holding the daemon until Run returns (up to
// its DrainTimeout); DrainContext(ctx) is done only when that hold ends:
// the node lost it (cut off from the servers: stop at once), or the drain
// timeout passed. Writes made while draining belong under it, with the
// daemon's token. For a context that is not a daemon's, it returns ctx.
func DrainContext(ctx context.Context) context.Context {
	if hold, ok := ctx.Value(holdKey{}).(context.Context); ok {
		return hold
	}
	return ctx
}

// lost is the election's OnLost: leadership ended, so the tenure ends too
// (the node campaigns again only if placement says so). Leadership the node
// let go itself (the daemon moved or returned, or the node leaves) was not
// lost.
func (t *tenure) lost(cause error) {
	t.mu.Lock()
	letGo := t.stopping
	t.mu.Unlock()
	if letGo {
		t.log.Info("let the daemon go", "cause", cause)
	} else {
		t.log.Warn("lost the daemon", "cause", cause)
	}
	t.stopElection()
}

// revoke stops the daemon so that it can move: its context is cancelled
// with ErrRevoked, and once it has returned (or its drain timeout has
// passed) the election is stopped, which releases the key. A tenure that
// has not won yet is abandoned instead.
func (t *tenure) revoke() { t.revokeFor(ErrRevoked) }

// revokeFor revokes the daemon as revoke does, with cause, which matches
// ErrRevoked and says why.
func (t *tenure) revokeFor(cause error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	switch {
	case t.stopping || t.st.State == Revoking:
	case t.stop == nil:
		t.stopElectionLocked()
	default:
		t.st.State, t.st.Since = Revoking, time.Now()
		t.publishLocked()
		t.cause = cause
		t.stop(cause)
		drain := t.daemon.DrainTimeout
		if drain == 0 {
			drain = DefaultDrainTimeout
		}
		if cause == ErrRevoked {
			t.log.Info("revoking the daemon", "drain_timeout", drain)
		} else {
			t.log.Info("revoking the daemon", "drain_timeout", drain, "cause", cause)
		}
		time.AfterFunc(drain, func() {
			t.mu.Lock()
			defer t.mu.Unlock()
			if !t.stopping {
				t.log.Error("the daemon did not return within its drain timeout; letting its key go: another node starts it when the key ages out", "drain_timeout", drain)
				t.stopElectionLocked()
			}
		})
	}
}

// abandon stops the election of a tenure that has not won (another node
// holds the daemon); it does nothing once the daemon runs.
func (t *tenure) abandon() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.stop == nil && t.st.State == Assigning {
		t.stopElectionLocked()
	}
}

func (t *tenure) stopElection() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.stopElectionLocked()
}

// stopElectionLocked stops the election in the background: Stop waits for
// OnWon to return, and OnWon may be the caller.
func (t *tenure) stopElectionLocked() {
	if t.stopping {
		return
	}
	t.stopping = true
	if t.cause != nil {
		t.end(t.cause) // the election's stand-down (OnLost, the history) says why
	}
	go t.e.Stop()
}

// publishLocked writes the tenure's status to its candidate record.
func (t *tenure) publishLocked() {
	if err := t.e.SetMetadata(t.st.metadata()); err != nil {
		t.log.Error("publishing the daemon's state", "error", err)
	}
}

func (t *tenure) status() DaemonStatus {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.st
}

func (t *tenure) running() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.st.State == Running && !t.stopping
}

func (t *tenure) revoking() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.st.State == Revoking
}

func (t *tenure) ended() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.over
}

// The restart backoff of a daemon that returns by itself.
var restartBackoff = election.ExponentialBackoff{Initial: 100 * time.Millisecond, Max: 30 * time.Second}

// healthyRun is how long a run must last for the backoff to start again.
const healthyRun = time.Minute

// runDaemon runs d until ctx is cancelled, starting it again after a
// backoff whenever it returns before; restarted is called with what it
// returned each time.
func runDaemon(ctx context.Context, d *Daemon, log *slog.Logger, restarted func(error)) {
	failures := 0
	for {
		began := time.Now()
		err := runSafely(ctx, d.Run)
		if ctx.Err() != nil {
			return
		}
		if time.Since(began) >= healthyRun {
			failures = 0
		}
		wait := restartBackoff.Duration(failures)
		failures++
		log.Warn("the daemon returned while it should run; starting it again", "error", err, "in", wait)
		restarted(err)
		timer := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			timer.Stop()
			return
		case <-timer.C:
		}
	}
}

// runSafely runs f, returning a panic as an error.
func runSafely(ctx context.Context, f func(context.Context) error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("fleet: the daemon panicked: %v", r)
		}
	}()
	return f(ctx)
}
