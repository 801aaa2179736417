package fleet

import (
	"context"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/kvelect/election"
)

// IsFleetKey reports whether key is one of a fleet's own election keys
// (its nodes' and its daemons'), for tools that list a bucket's elections.
func IsFleetKey(key string) bool {
	return strings.HasPrefix(key, keyPrefix)
}

// DaemonKey returns the election key of the daemon named name: its holder
// runs it, and its revisions are the daemon's fencing tokens.
func DaemonKey(name string) string { return daemonKey(name) }

// Member is a live node of a fleet, as its record describes it.
type Member struct {
	Name     string
	Capacity int
	// Priority and PreferHigher are the node's Config.Priority and
	// Config.PreferHigher: 0 and false for a node that set neither, or one
	// older than priorities.
	Priority     int
	PreferHigher bool
	Labels       map[string]string
	Version      string
	// Daemons are the daemons it offers, sorted: those it can run whose
	// health check (Daemon.Health) passes, or that have none. Placement
	// gives it only these.
	Daemons []string
	// Unhealthy holds the daemons it lists but does not offer, by name,
	// each with why: its health check failed (how many times in a row, and
	// the latest error), or has not passed yet. Empty when every check
	// passes.
	Unhealthy map[string]string
	Since     time.Time // when it began to join, by its own clock
	// checked: the node has health-checked daemons, so its record changes
	// while it is a member.
	checked bool
}

// memberOf reads a node's record; false if c is not one.
func memberOf(c election.Candidate) (Member, bool) {
	name, ok := strings.CutPrefix(c.Key, nodePrefix)
	if !ok || name != c.Name {
		return Member{}, false
	}
	capacity, err := strconv.Atoi(c.Metadata[metaCapacity])
	if err != nil || capacity < 1 {
		return Member{}, false
	}
	priority := 0
	if p, ok := c.Metadata[metaPriority]; ok {
		if priority, err = strconv.Atoi(p); err != nil || priority < 0 {
			return Member{}, false
		}
	}
	m := Member{Name: name, Capacity: capacity, Priority: priority, PreferHigher: c.Metadata[metaPrefer] == "true",
		Version: c.Metadata[metaVersion], Since: c.Since, Labels: map[string]string{}}
	if d := c.Metadata[metaDaemons]; d != "" {
		m.Daemons = strings.Split(d, ",")
	}
	m.checked = c.Metadata[metaHealth] == "true"
	for k, v := range c.Metadata {
		if label, ok := strings.CutPrefix(k, metaLabel); ok {
			m.Labels[label] = v
		}
		if d, ok := strings.CutPrefix(k, metaUnhealthy); ok {
			if m.Unhealthy == nil {
				m.Unhealthy = map[string]string{}
			}
			m.Unhealthy[d] = v
		}
	}
	return m, true
}

// DaemonState is where a daemon stands.
type DaemonState string

// The states of a daemon.
const (
	// Assigning: a node campaigns for the daemon, or won its key and has
	// not started it yet.
	Assigning DaemonState = "assigning"
	// Running: a node runs the daemon (or waits out a backoff between two
	// runs).
	Running DaemonState = "running"
	// Revoking: the node was asked to stop the daemon (to move it, or
	// because it leaves) and waits for it to return; it holds the daemon
	// until then.
	Revoking DaemonState = "revoking"
	// Stopped: no node runs the daemon or campaigns for it.
	Stopped DaemonState = "stopped"
)

// DaemonStatus is a daemon as any process reads it.
type DaemonStatus struct {
	Name  string
	Node  string // the node that holds it, or campaigns for it; "" when stopped
	State DaemonState
	// Token is the fencing token of the node's hold on the daemon (0 if not
	// running): it grows with every new hold.
	Token uint64
	// Since is when the node started the daemon, or entered the state.
	Since time.Time
	// Restarts counts the times the daemon returned by itself and was
	// started again in this hold; LastError is the latest error it returned.
	Restarts  int
	LastError string
	// Restarted is when the daemon last returned by itself, by its node's
	// clock; zero if it has not in this hold.
	Restarted time.Time
}

// CrashLooping reports whether the daemon runs but returned by itself less
// than a minute before now (the run a restart backoff counts as healthy):
// it may be failing over and over, as a missing command does.
func (s DaemonStatus) CrashLooping(now time.Time) bool {
	return s.State == Running && !s.Restarted.IsZero() && now.Sub(s.Restarted) < healthyRun
}

// The metadata of a daemon's candidate record.
const (
	metaState    = "state"
	metaToken    = "token"
	metaSince    = "since"
	metaRestarts = "restarts"
	metaError    = "error"
	metaRestart  = "restarted"
)

// maxErrorLength bounds the error text a daemon's record keeps.
const maxErrorLength = 512

// metadata encodes the status for the daemon's record.
func (s DaemonStatus) metadata() map[string]string {
	m := map[string]string{metaState: string(s.State), metaSince: s.Since.UTC().Format(time.RFC3339Nano)}
	if s.Token != 0 {
		m[metaToken] = strconv.FormatUint(s.Token, 10)
	}
	if s.Restarts > 0 {
		m[metaRestarts] = strconv.Itoa(s.Restarts)
	}
	if !s.Restarted.IsZero() {
		m[metaRestart] = s.Restarted.UTC().Format(time.RFC3339Nano)
	}
	if s.LastError != "" {
		m[metaError] = s.LastError[:min(len(s.LastError), maxErrorLength)]
	}
	return m
}

// daemonStatusOf reads a daemon's record.
func daemonStatusOf(name string, c election.Candidate) DaemonStatus {
	s := DaemonStatus{Name: name, Node: c.Name, State: DaemonState(c.Metadata[metaState]), LastError: c.Metadata[metaError]}
	s.Token, _ = strconv.ParseUint(c.Metadata[metaToken], 10, 64)
	s.Since, _ = time.Parse(time.RFC3339Nano, c.Metadata[metaSince])
	s.Restarts, _ = strconv.Atoi(c.Metadata[metaRestarts])
	s.Restarted, _ = time.Parse(time.RFC3339Nano, c.Metadata[metaRestart])
	if s.State == "" {
		s.State = Assigning
	}
	return s
}

// Status is a fleet as any process reads it from its bucket.
type Status struct {
	Members []Member       // by name
	Daemons []DaemonStatus // by name: every daemon a member lists or a node holds
}

// ReadStatus reads the fleet in the bucket b: its live members and where
// each daemon stands. It reads what b's watcher holds, once it has read the
// bucket (ctx bounds that wait); any process can call it, member or not.
func ReadStatus(ctx context.Context, b *election.Bucket) (Status, error) {
	leaders, err := b.Leaders(ctx)
	if err != nil {
		return Status{}, err
	}
	candidates, err := b.AllCandidates(ctx)
	if err != nil {
		return Status{}, err
	}
	return statusOf(leaders, candidates), nil
}

// statusOf builds the status from the holders of the bucket's keys and the
// candidate records.
func statusOf(leaders []election.Leader, candidates map[string][]election.Candidate) Status {
	var st Status
	daemons := map[string]bool{}
	holders := map[string]string{}
	for _, l := range leaders {
		if name, ok := strings.CutPrefix(l.Key, nodePrefix); ok && l.Name == name {
			for _, c := range candidates[l.Key] {
				if m, ok := memberOf(c); ok {
					st.Members = append(st.Members, m)
					for _, d := range m.Daemons {
						daemons[d] = true
					}
					for d := range m.Unhealthy { // listed, if offered nowhere: stopped
						daemons[d] = true
					}
				}
			}
		}
		if name, ok := strings.CutPrefix(l.Key, daemonPrefix); ok {
			holders[name] = l.Name
			daemons[name] = true
		}
	}
	sortMembers(st.Members)
	for _, d := range slices.Sorted(maps.Keys(daemons)) {
		s := DaemonStatus{Name: d, State: Stopped}
		records := candidates[daemonKey(d)]
		if holder := holders[d]; holder != "" {
			s = DaemonStatus{Name: d, Node: holder, State: Running}
			for _, c := range records {
				if c.Name == holder {
					s = daemonStatusOf(d, c)
				}
			}
		} else if len(records) > 0 {
			s = daemonStatusOf(d, records[0])
			s.State, s.Token = Assigning, 0
		}
		st.Daemons = append(st.Daemons, s)
	}
	return st
}

// MemberEvent is a node joining or leaving a fleet.
type MemberEvent struct {
	Joined bool // false: the node left
	Member Member
}

// WatchMembers returns a channel that receives the fleet's members as they
// join and leave: first a join for each live member, then each change.
// A node that leaves gracefully is reported at once; one that crashed or
// was cut off a TTL after its last renewal reached the bucket's watcher.
// It polls nothing. The channel is closed when ctx is done or b is closed.
func WatchMembers(ctx context.Context, b *election.Bucket) (<-chan MemberEvent, error) {
	changes, err := b.ObservePrefix(ctx, nodePrefix)
	if err != nil {
		return nil, err
	}
	out := make(chan MemberEvent)
	go func() {
		defer close(out)
		send := func(ev MemberEvent) bool {
			select {
			case out <- ev:
				return true
			case <-ctx.Done():
				return false
			}
		}
		live := map[string]Member{}
		unread := unreadMembers{}
		retry := time.NewTimer(time.Hour)
		defer retry.Stop()
		for {
			select {
			case l, ok := <-changes:
				if !ok {
					return
				}
				name := strings.TrimPrefix(l.Key, nodePrefix)
				m, known := live[name]
				switch {
				case l.Name == name && !known:
					unread[name] = true
				case l.Name != name && known:
					delete(live, name)
					if !send(MemberEvent{Member: m}) {
						return
					}
				case l.Name != name:
					delete(unread, name)
				}
			case <-retry.C:
			}
			if !unread.read(ctx, b, func(m Member) bool {
				live[m.Name] = m
				return send(MemberEvent{Joined: true, Member: m})
			}) {
				return
			}
			retry.Stop()
			if len(unread) > 0 {
				retry.Reset(shortWait(b.TTL()))
			}
		}
	}()
	return out, nil
}

// unreadMembers are members whose key shows them live but whose record
// has not arrived: a node that was cut off or paused for over a TTL renews
// its key and rewrites its record at about the same time, in either order.
// They are read again every shortWait until it has.
type unreadMembers map[string]bool

// read reads the record of each, and passes found each it can read, which
// is then no longer unread. It stops when found returns false, and returns
// false then.
func (u unreadMembers) read(ctx context.Context, b *election.Bucket, found func(Member) bool) bool {
	for name := range u {
		m, ok := readMember(ctx, b, name)
		if !ok {
			continue
		}
		delete(u, name)
		if !found(m) {
			return false
		}
	}
	return true
}

// shortWait is a twentieth of the TTL, at most 250 ms: how long a node's
// view must stay quiet before it moves daemons (or, just joined, claims
// any), and how often it reads unread members again.
func shortWait(ttl time.Duration) time.Duration { return min(ttl/20, 250*time.Millisecond) }

// readMember reads the record of the node name.
func readMember(ctx context.Context, b *election.Bucket, name string) (Member, bool) {
	candidates, err := b.Candidates(ctx, nodeKey(name))
	if err != nil {
		return Member{}, false
	}
	for _, c := range candidates {
		if m, ok := memberOf(c); ok {
			return m, true
		}
	}
	return Member{}, false
}
