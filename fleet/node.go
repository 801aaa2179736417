package fleet

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/kvelect/election"
)

// Node is this process's membership of a fleet and the daemons it runs.
// Make one with Join and end it with Leave.
type Node struct {
	cfg     Config
	bucket  *election.Bucket
	log     *slog.Logger
	self    *election.Election // leads the node key while this node is a member
	daemons map[string]*Daemon
	// fallback is how long a node that placement did not choose waits
	// before it claims a free daemon itself, in case the chosen node does
	// not: a TTL, by when a chosen node that is gone has aged out of the
	// members and placement chooses another.
	fallback time.Duration

	events  chan struct{} // buffered 1: a tenure changed (see notify)
	leaving chan struct{} // closed by Leave
	done    chan struct{} // closed when the controller has returned
	left    chan struct{} // closed when Leave has returned
	cancel  context.CancelFunc
	leave   sync.Once

	mu      sync.Mutex
	err     error              // why the node left by itself (Err)
	tenures map[string]*tenure // the daemons this node campaigns for, runs or revokes
	members map[string]Member  // the live members as last seen
	// placeNodes are the members as placement sees them, and placeable
	// every daemon some member can run, sorted (nil: to compute again):
	// both change only when the members do.
	placeNodes []placeNode
	placeable  []string
	unread     unreadMembers
	holders    map[string]string    // daemon → the node holding it, as last seen
	previous   map[string]string    // free daemon → the node that held it last
	freed      map[string]time.Time // free daemon → when this node first saw it free
	// lastChange is when the watcher last showed a change of the fleet;
	// settle is how long the view must stay quiet before daemons move.
	lastChange time.Time
	settle     time.Duration
	balanced   bool // at the last look, every daemon ran where placement wants it
	claiming   bool // the view has been quiet once since the node joined
	// health holds the verdict of each health-checked daemon (health.go);
	// nowhere the daemons this node lists that no member offers, as last
	// logged.
	health  map[string]*daemonHealth
	nowhere map[string]bool
	checks  sync.WaitGroup // the health checks' goroutines
}

// Join makes this process a node of the fleet in the bucket b, under
// cfg.Name, and returns once it is a member: it leads its node key, which
// every process sees (WatchMembers, ReadStatus). From then on it runs its
// share of the daemons it can run, until Leave. ctx bounds the wait to join.
//
// Node names must be unique in a fleet. If another live process runs a
// node of the name, Join returns ErrNameTaken (also matching
// election.ErrDuplicateName, naming both processes) within about two
// thirds of a TTL, and never writes over that node's record nor deletes
// it. Joining takes up to a TTL and a third when the name's previous process crashed
// (its record and key must age out first). A bad cfg gives
// ErrInvalidConfig.
func Join(ctx context.Context, b *election.Bucket, cfg Config) (*Node, error) {
	if b == nil {
		return nil, fmt.Errorf("%w: nil bucket; open one with election.OpenBucket", ErrInvalidConfig)
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	n := &Node{
		cfg:      cfg,
		bucket:   b,
		log:      log.With("node", cfg.Name),
		daemons:  map[string]*Daemon{},
		fallback: b.TTL(),
		settle:   shortWait(b.TTL()),
		events:   make(chan struct{}, 1),
		leaving:  make(chan struct{}),
		done:     make(chan struct{}),
		left:     make(chan struct{}),
		tenures:  map[string]*tenure{},
		members:  map[string]Member{},
		holders:  map[string]string{},
		previous: map[string]string{},
		freed:    map[string]time.Time{},
		unread:   unreadMembers{},
		health:   map[string]*daemonHealth{},
		nowhere:  map[string]bool{},
	}
	for i := range cfg.Daemons {
		n.daemons[cfg.Daemons[i].Name] = &cfg.Daemons[i]
		if cfg.Daemons[i].Health != nil { // offered once a check passed
			n.health[cfg.Daemons[i].Name] = &daemonHealth{}
		}
	}
	joined := make(chan struct{})
	var once sync.Once
	self, err := b.NewElection(cfg.Name, nodeKey(cfg.Name),
		election.WithoutSplay(),
		fleetPriority, // after the bucket's defaults, which it overrides
		election.WithMetadata(cfg.metadata(n.unhealthyLocked())),
		election.WithLogger(n.log),
		election.OnWon(func() { once.Do(func() { close(joined) }) }),
		election.OnLost(func(cause error) {
			if errors.Is(cause, election.ErrStopped) { // Leave, a failed Join, or the name taken
				n.log.Info("no longer a member of the fleet: leaving")
				return
			}
			n.log.Warn("no longer a member of the fleet", "cause", cause)
		}),
	)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	n.self = self
	runCtx, cancel := context.WithCancel(context.Background())
	n.cancel = cancel
	ended := make(chan error, 1) // what Start returned
	go func() { ended <- self.Start(runCtx) }()

	select {
	case <-joined:
	case err := <-ended:
		cancel()
		if taken := nameTaken(cfg.Name, err); taken != nil {
			return nil, taken
		}
		return nil, fmt.Errorf("fleet: node %q did not join: %w", cfg.Name, cmp.Or(err, errBucketClosed))
	case <-ctx.Done():
		self.Stop()
		cancel()
		return nil, fmt.Errorf("fleet: node %q did not join: %w", cfg.Name, ctx.Err())
	}

	changes, err := b.ObservePrefix(runCtx, keyPrefix)
	if err != nil {
		self.Stop()
		cancel()
		return nil, err
	}
	go n.control(runCtx, changes)
	go n.watchName(ended)
	n.startHealthChecks(runCtx)
	n.log.Info("joined the fleet", "capacity", cfg.capacity(), "priority", cfg.Priority, "prefer_higher", cfg.PreferHigher, "daemons", len(cfg.Daemons))
	return n, nil
}

// watchName waits for the node's election to end, with what its Start
// returned: if another live node took the name (a node cut off for over a
// TTL, while another process joined under its name), the node leaves.
func (n *Node) watchName(ended <-chan error) {
	taken := nameTaken(n.cfg.Name, <-ended)
	if taken == nil {
		return // Leave stopped it
	}
	n.mu.Lock()
	n.err = taken
	n.mu.Unlock()
	n.log.Error("another live node runs under this node's name: leaving the fleet", "error", taken)
	n.Leave()
}

// nameTakenError is the error of a node whose name another live node
// holds: ErrNameTaken, over the election's *election.DuplicateError.
type nameTakenError struct {
	name string
	dup  *election.DuplicateError
}

// nameTaken returns the error of the node name when err, what its node
// election's Start returned, says another live node holds the name, and
// nil otherwise.
func nameTaken(name string, err error) error {
	var dup *election.DuplicateError
	if !errors.As(err, &dup) {
		return nil
	}
	return &nameTakenError{name: name, dup: dup}
}

func (e *nameTakenError) Error() string {
	return fmt.Sprintf("%v: node %q already runs as %s; refused this one, %s: give each node a name of its own",
		ErrNameTaken, e.name, e.dup.Running, e.dup.Refused)
}

// Unwrap returns ErrNameTaken and the *election.DuplicateError, for
// errors.Is and errors.As.
func (e *nameTakenError) Unwrap() []error { return []error{ErrNameTaken, e.dup} }

// errBucketClosed is the cause of a failed Join when the bucket was closed
// during it.
var errBucketClosed = errors.New("the bucket was closed")

// Name returns the node's name.
func (n *Node) Name() string { return n.cfg.Name }

// IsMember reports whether this node is a member now: it leads its node
// key. A node cut off from the servers stops being one at its own renewal
// deadline, as its daemons stop at theirs.
func (n *Node) IsMember() bool { return n.self.IsLeader() }

// Members returns the live members as this node last saw them, by name.
func (n *Node) Members() []Member {
	n.mu.Lock()
	defer n.mu.Unlock()
	out := make([]Member, 0, len(n.members))
	for _, m := range n.members {
		out = append(out, m)
	}
	sortMembers(out)
	return out
}

// Balanced reports whether, as this node sees the fleet, every daemon runs
// where placement wants it: nothing to claim, revoke or move. Every node
// of a fleet at rest reports true.
func (n *Node) Balanced() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.balanced
}

// Daemons returns the daemons this node campaigns for, runs or revokes,
// by name.
func (n *Node) Daemons() []DaemonStatus {
	n.mu.Lock()
	tenures := make([]*tenure, 0, len(n.tenures))
	for _, t := range n.tenures {
		tenures = append(tenures, t)
	}
	n.mu.Unlock()
	out := make([]DaemonStatus, len(tenures))
	for i, t := range tenures {
		out[i] = t.status()
	}
	sortDaemons(out)
	return out
}

// Leave ends the membership gracefully: the node gives up its node key
// first, so that no node places a daemon on it any more, then revokes every
// daemon it runs (each has its drain timeout to return) and lets each go
// as soon as it has returned, so that another node starts it at once.
// Leave returns when every daemon has been let go. It is safe to call more
// than once.
func (n *Node) Leave() {
	n.leave.Do(func() {
		n.self.Stop()
		close(n.leaving)
		n.notify()
		<-n.done
		n.cancel()
		n.checks.Wait()
		n.log.Info("left the fleet")
		close(n.left)
	})
}

// Done returns a channel that is closed once the node has left the fleet:
// Leave returned, or the node left by itself because another live node
// took its name (Err says so).
func (n *Node) Done() <-chan struct{} { return n.left }

// Err returns why the node left the fleet by itself, an error matching
// ErrNameTaken and election.ErrDuplicateName that names both processes, or
// nil if it did not.
func (n *Node) Err() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.err
}

// notify wakes the controller.
func (n *Node) notify() {
	select {
	case n.events <- struct{}{}:
	default:
	}
}

// control follows the fleet's keys and acts on them: it claims the daemons
// placement gives this node, revokes those it gives to others, and ends
// tenures whose elections are done. It returns once the node has left and
// every tenure has ended, or the bucket was closed.
func (n *Node) control(ctx context.Context, changes <-chan election.Leader) {
	defer close(n.done)
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	leaving := n.leaving
	var notBefore time.Time // the next look, spaced after the last (see actSpacing)
	for {
		select {
		case l, ok := <-changes:
			for more := true; more; { // this change, then every one already queued
				if !ok { // the bucket was closed: its elections are stopped
					changes = nil
					n.stopAll()
					break
				}
				n.see(ctx, l)
				select {
				case l, ok = <-changes:
				default:
					more = false
				}
			}
		case <-n.events:
		case <-leaving:
			leaving = nil
		case <-timer.C:
		}
		left := leaving == nil || changes == nil
		if wait := time.Until(notBefore); wait > 0 && !left {
			timer.Stop()
			timer.Reset(wait) // the changes meanwhile are seen, and acted on together
			continue
		}
		began := time.Now()
		next := n.act(ctx, left)
		notBefore = time.Now().Add(actSpacing * time.Since(began))
		n.mu.Lock()
		idle := len(n.tenures) == 0
		n.mu.Unlock()
		if left && idle {
			return
		}
		timer.Stop()
		if !next.IsZero() {
			timer.Reset(time.Until(next))
		}
	}
}

// actSpacing spaces the controller's looks at the fleet so that they take
// at most one part in actSpacing+1 of its time: a look costs time linear in
// the daemons, and in a burst of changes (nodes joining, a node's daemons
// aging out) it would otherwise follow each one.
const actSpacing = 19

// see applies a change of holder of one of the fleet's keys.
func (n *Node) see(ctx context.Context, l election.Leader) {
	n.mu.Lock()
	n.lastChange = time.Now()
	n.mu.Unlock()
	if name, ok := strings.CutPrefix(l.Key, nodePrefix); ok {
		n.mu.Lock()
		defer n.mu.Unlock()
		delete(n.members, name)
		delete(n.unread, name)
		n.placeNodes, n.placeable = nil, nil
		if l.Name == name {
			n.unread[name] = true
			n.readMembersLocked(ctx)
		}
		return
	}
	d, ok := strings.CutPrefix(l.Key, daemonPrefix)
	if !ok {
		return
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if l.Name == "" {
		if holder := n.holders[d]; holder != "" {
			n.previous[d] = holder
		}
		delete(n.holders, d)
		n.freed[d] = time.Now()
		return
	}
	n.holders[d] = l.Name
	delete(n.previous, d)
	delete(n.freed, d)
}

// readMembersLocked makes members of the unread members whose records
// have arrived.
func (n *Node) readMembersLocked(ctx context.Context) {
	n.unread.read(ctx, n.bucket, func(m Member) bool {
		if m.Name == n.cfg.Name {
			m = n.ownMemberLocked(m)
		}
		n.members[m.Name] = m
		n.placeNodes, n.placeable = nil, nil
		return true
	})
}

// act compares what the node does with what placement asks of it, and
// starts what differs: claims, revocations, abandoned claims. left means
// the node leaves: it claims nothing and revokes everything. It returns
// when it should look again for a fallback claim (zero: no need).
func (n *Node) act(ctx context.Context, left bool) time.Time {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.readMembersLocked(ctx)
	for d, t := range n.tenures {
		if t.ended() {
			delete(n.tenures, d)
		}
	}
	if left {
		for _, t := range n.tenures {
			t.revoke()
		}
		return time.Time{}
	}
	var next time.Time
	now := time.Now()
	if n.anyCheckedLocked() { // their records change with no change of holder
		n.rereadCheckedLocked(ctx)
		next = now.Add(n.settle)
	}
	_, member := n.members[n.cfg.Name]
	in := n.placeInput()
	target := place(in)
	n.noteNowhereLocked(in)
	if len(n.unread) > 0 {
		next = now.Add(n.settle) // to read them again
	}
	// Moves wait until the view has been quiet for settle and shows every
	// win of this node, so that a burst of changes (nodes joining at once,
	// or a node's own claims not yet seen) does not move daemons back and
	// forth.
	quiet := !now.Before(n.lastChange.Add(n.settle))
	settled := quiet
	n.balanced = member
	for d, t := range n.tenures {
		holder := n.holders[d]
		if holder != n.cfg.Name {
			settled = false
		}
		switch {
		case holder != "" && holder != n.cfg.Name:
			t.abandon() // another node won it; a no-op once this node leads
		case !n.offersLocked(d): // its health check failed: at once, not once settled
			t.revokeFor(cmpErr(n.health[d].cause, ErrRevoked))
		case !member:
			t.revoke()
		}
	}
	for d, node := range target {
		if in.holders[d] != node {
			n.balanced = false
		}
	}
	if !member {
		return next
	}
	for d, t := range n.tenures {
		if !t.running() || target[d] == n.cfg.Name {
			continue
		}
		if !settled {
			if !quiet { // else a holder must change first, which wakes the node
				next = earliest(next, n.lastChange.Add(n.settle))
			}
			continue
		}
		n.log.Debug("moving the daemon", "daemon", d, "to", target[d], "view", viewOf(in))
		t.revoke() // placement moves it to another node
	}
	// A node that just joined claims nothing until its view has been quiet
	// for settle: nodes that join together see each other first, and then
	// each claims its share, not the others'.
	if !n.claiming && !quiet {
		return earliest(next, n.lastChange.Add(n.settle))
	}
	n.claiming = true
	for d := range n.daemons {
		if n.tenures[d] != nil || n.holders[d] != "" || !n.offersLocked(d) {
			continue
		}
		if _, seen := n.freed[d]; !seen { // never held since this node joined
			n.freed[d] = now
		}
		if target[d] != n.cfg.Name {
			at := n.freed[d].Add(n.fallback)
			if now.Before(at) {
				next = earliest(next, at)
				continue
			}
		}
		t, err := n.claim(d)
		if err != nil {
			n.log.Error("cannot campaign for a daemon", "daemon", d, "error", err)
			continue
		}
		n.tenures[d] = t
	}
	return next
}

// noteNowhereLocked logs each daemon this node lists that starts or stops
// running nowhere because no member offers it: its health check fails on
// every node that lists it (or has not passed yet).
func (n *Node) noteNowhereLocked(in placeInput) {
	for d, h := range n.health {
		_, offered := slices.BinarySearch(in.daemons, d)
		nowhere := !offered && n.holders[d] == ""
		switch {
		case nowhere && !n.nowhere[d] && h.checked:
			n.log.Warn("the daemon runs nowhere: no live node that lists it passes its health check", "daemon", d, "here", h.why())
		case !nowhere && n.nowhere[d]:
			n.log.Info("a node offers the daemon again", "daemon", d)
		}
		if nowhere && !h.checked {
			continue // not logged until this node has checked it
		}
		n.nowhere[d] = nowhere
	}
}

// cmpErr returns err, or fallback if err is nil.
func cmpErr(err, fallback error) error {
	if err == nil {
		return fallback
	}
	return err
}

// placeInput is what the node has seen, for place. A daemon this node
// revokes counts as free and is not offered to it again.
func (n *Node) placeInput() placeInput {
	if n.placeable == nil {
		n.placeNodes, n.placeable = placeNodesOf(n.members)
	}
	in := placeInput{
		nodes: n.placeNodes, daemons: n.placeable,
		holders: map[string]string{}, previous: map[string]string{}, since: map[string]time.Time{},
	}
	for d, h := range n.holders {
		if h == n.cfg.Name && n.tenures[d] == nil { // let go, the watcher has not shown it yet
			in.previous[d] = h
			continue
		}
		in.holders[d] = h
	}
	for d, p := range n.previous {
		in.previous[d] = p
	}
	for d, t := range n.tenures {
		switch {
		case t.revoking():
			delete(in.holders, d)
			in.previous[d] = n.cfg.Name
		case t.running(): // the watcher may not have shown the win yet
			in.holders[d] = n.cfg.Name
			in.since[d] = t.status().Since
		}
	}
	return in
}

// placeNodesOf returns the members as placement sees them, by name, and
// every daemon some member can run, sorted.
func placeNodesOf(members map[string]Member) ([]placeNode, []string) {
	nodes := make([]placeNode, 0, len(members))
	daemons := map[string]bool{}
	for _, m := range members {
		can := make(map[string]bool, len(m.Daemons))
		for _, d := range m.Daemons {
			can[d] = true
			daemons[d] = true
		}
		nodes = append(nodes, placeNode{name: m.Name, capacity: m.Capacity, canRun: can, priority: m.Priority, preferHigher: m.PreferHigher})
	}
	sortPlaceNodes(nodes)
	placeable := make([]string, 0, len(daemons))
	for d := range daemons {
		placeable = append(placeable, d)
	}
	slices.Sort(placeable)
	return nodes, placeable
}

// stopAll stops every tenure's election: the bucket was closed.
func (n *Node) stopAll() {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, t := range n.tenures {
		t.revoke()
		t.abandon()
	}
}

// earliest returns the earlier of two moments, zero meaning none.
func earliest(a, b time.Time) time.Time {
	if a.IsZero() || (!b.IsZero() && b.Before(a)) {
		return b
	}
	return a
}

func sortMembers(m []Member) {
	slices.SortFunc(m, func(a, b Member) int { return strings.Compare(a.Name, b.Name) })
}

func sortDaemons(d []DaemonStatus) {
	slices.SortFunc(d, func(a, b DaemonStatus) int { return strings.Compare(a.Name, b.Name) })
}

func sortPlaceNodes(n []placeNode) {
	slices.SortFunc(n, func(a, b placeNode) int { return strings.Compare(a.name, b.name) })
}

// viewOf summarizes placement's input for the log: each member's daemons
// and the free ones.
func viewOf(in placeInput) string {
	held := map[string][]string{}
	for _, d := range in.daemons {
		held[in.holders[d]] = append(held[in.holders[d]], d)
	}
	var parts []string
	for _, m := range in.nodes {
		parts = append(parts, fmt.Sprintf("%s:%s", m.name, strings.Join(held[m.name], ",")))
	}
	return strings.Join(parts, " ") + " free:" + strings.Join(held[""], ",")
}
