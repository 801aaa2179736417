package fleet

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/kvelect/election"
)

// The keys of a fleet in its bucket: each node leads "fleet.node.<name>"
// while it is a member, and the node that runs a daemon leads
// "fleet.daemon.<name>". Both are ordinary election keys.
const (
	keyPrefix    = "fleet."
	nodePrefix   = keyPrefix + "node."
	daemonPrefix = keyPrefix + "daemon."
)

func nodeKey(name string) string   { return nodePrefix + name }
func daemonKey(name string) string { return daemonPrefix + name }

// DefaultDrainTimeout is how long a daemon is given to return after its
// context is cancelled to move it, unless its Daemon says otherwise.
const DefaultDrainTimeout = 10 * time.Second

// Errors of Join.
var (
	// ErrInvalidConfig means a Config, or one of its daemons, is unusable;
	// the error names the field and what is allowed.
	ErrInvalidConfig = errors.New("fleet: invalid configuration")
	// ErrNameTaken means another live node has the name: its process keeps
	// writing the name's node record. The error also matches
	// election.ErrDuplicateName, whose message names both processes.
	ErrNameTaken = errors.New("fleet: node name live elsewhere")
)

// ErrRevoked is the cause (context.Cause) of a daemon's context cancelled
// because the daemon moves to another node or its node leaves: its node
// still holds the daemon, and lets it go once the daemon has returned or its
// drain timeout has passed. A context cancelled for another cause means the
// node lost the daemon (cut off from the servers, or its key was removed):
// the daemon must return at once, as another node may start it when the key
// ages out.
var ErrRevoked = errors.New("fleet: daemon revoked")

// Daemon is a named unit of background work that the fleet runs on one
// live node at a time.
type Daemon struct {
	// Name identifies the daemon in the fleet: letters, digits, - _ = /
	// and dots (not at the start or end, not twice in a row). Nodes that
	// register the same name can each run it; it runs on one of them.
	Name string
	// Run does the work until ctx is cancelled. ctx carries the daemon's
	// fencing token (election.TokenFromContext). If Run returns before ctx
	// is cancelled, with an error, nil or a panic, it is started again
	// after a backoff (100 ms doubling to 30 s, back to 100 ms after a run
	// of a minute).
	Run func(ctx context.Context) error
	// DrainTimeout is how long Run may take to return once its context is
	// cancelled to move the daemon (0: DefaultDrainTimeout). Past it, the
	// node lets the daemon's key go, and another node starts the daemon
	// when the key ages out.
	DrainTimeout time.Duration

	// Health, if set, says whether this node can run the daemon now: nil
	// when it can (what the daemon needs answers from here: its database,
	// a port), an error saying why not. The node calls it every
	// HealthInterval, whether or not it runs the daemon, with a context
	// that ends after HealthInterval: a check that has not returned by
	// then failed, and so does each interval until it returns (it is not
	// called again before). Health should return when its context ends:
	// one that does not is left running when the node leaves.
	//
	// The node offers the daemon (lists it in its record, so that
	// placement may give it the daemon) once a check passed, and stops
	// offering it once HealthFailures checks in a row failed. A node that
	// runs the daemon then cancels its context with a cause matching
	// ErrRevoked and election.ErrHealthCheck, whose text has the check's
	// error, and hands it over as any move does, drain first, to another
	// node that offers it. When its check passes again the node offers
	// the daemon again, to placement as any node: a daemon does not move
	// back for it, except as balance moves daemons. A daemon whose check
	// fails on every node that lists it runs nowhere until one passes.
	Health func(ctx context.Context) error
	// HealthInterval is how often Health runs, and how long each check may
	// take (0: DefaultHealthInterval; else at least
	// election.MinHealthInterval).
	HealthInterval time.Duration
	// HealthFailures is how many failed checks in a row make the node stop
	// offering the daemon (0: DefaultHealthFailures).
	HealthFailures int
}

// Defaults of a daemon's health check: a node whose check keeps failing
// stops offering the daemon within about 15 s.
const (
	DefaultHealthInterval = 5 * time.Second
	DefaultHealthFailures = 3
)

// healthInterval returns the daemon's health check interval.
func (d *Daemon) healthInterval() time.Duration {
	if d.HealthInterval == 0 {
		return DefaultHealthInterval
	}
	return d.HealthInterval
}

// healthFailures returns the failed checks in a row that end its offer.
func (d *Daemon) healthFailures() int {
	if d.HealthFailures == 0 {
		return DefaultHealthFailures
	}
	return d.HealthFailures
}

// Config describes a node joining a fleet.
type Config struct {
	// Name is the node's name, stable across restarts: any candidate name
	// (election.CheckCandidate): letters, digits, - _ = / and dots. At most
	// one live node has a name: Join refuses a second with ErrNameTaken.
	Name string
	// Capacity is the node's weight in placement (0: 1): a node of capacity
	// 2 runs twice the daemons of a node of capacity 1.
	Capacity int
	// Priority ranks the node in placement: 0 (the default) or more, the
	// higher preferred; negative is refused. A daemon starts only on the
	// live nodes of the highest priority among those that can run it,
	// spread over them by capacity; nodes of lower priority start it only
	// when no node of higher priority that can run it is live (it left, or
	// crashed and aged out of the members), and keep it when one joins
	// unless they set PreferHigher. With every node at the same
	// priority, 0 or not, placement is as without priorities. Unlike
	// election.WithPriority, 0 does not mean "never": a node that must not
	// run a daemon does not list it. Every node of a fleet that uses
	// priorities should run a version of this package that knows them: an
	// older node places daemons as if every priority were equal.
	Priority int
	// PreferHigher makes the node hand its daemons over to a live node of
	// higher priority that can run them as soon as it sees one, as a join
	// moves a node's excess: each daemon's context is cancelled with
	// ErrRevoked and the next node starts it once it has returned. Without
	// it, a daemon the node started while no higher node was live keeps
	// running here until this node leaves or loses it (no churn when a
	// primary comes back), though new and freed daemons go to the higher
	// node. Set it on the nodes that should give work back: the standby
	// site's, or all.
	PreferHigher bool
	// Labels describe the node to readers (zone, host); placement ignores
	// them.
	Labels map[string]string
	// Version is the node's software version, shown to readers.
	Version string
	// Daemons are the daemons this node can run.
	Daemons []Daemon
	// Logger receives the node's records; nil discards them.
	Logger *slog.Logger
}

// Validate says what is wrong with cfg, without asking the server: an error
// matching ErrInvalidConfig that names the field and what is allowed. Join
// calls it first.
func (cfg *Config) Validate() error {
	if err := election.CheckCandidate(cfg.Name, nodeKey(cfg.Name)); err != nil {
		return fmt.Errorf("%w: node name: %w", ErrInvalidConfig, err)
	}
	if cfg.Capacity < 0 {
		return fmt.Errorf("%w: capacity %d of node %q: want 1 or more (0 means 1)", ErrInvalidConfig, cfg.Capacity, cfg.Name)
	}
	if cfg.Priority < 0 {
		return fmt.Errorf("%w: priority %d of node %q: want 0 (the default: every node equal) or more, the higher preferred", ErrInvalidConfig, cfg.Priority, cfg.Name)
	}
	for k := range cfg.Labels {
		if k == "" || strings.ContainsAny(k, "=,") {
			return fmt.Errorf("%w: label %q of node %q: want a non-empty name without = or ,", ErrInvalidConfig, k, cfg.Name)
		}
	}
	seen := map[string]bool{}
	for i, d := range cfg.Daemons {
		switch {
		case d.Name == "" || election.CheckKey(daemonKey(d.Name)) != nil:
			return fmt.Errorf("%w: daemon %d of node %q is named %q: letters, digits, - _ = / and dots (not at the start or end, not twice in a row)", ErrInvalidConfig, i+1, cfg.Name, d.Name)
		case seen[d.Name]:
			return fmt.Errorf("%w: daemon %q is listed twice on node %q", ErrInvalidConfig, d.Name, cfg.Name)
		case d.Run == nil:
			return fmt.Errorf("%w: daemon %q of node %q has no Run function", ErrInvalidConfig, d.Name, cfg.Name)
		case d.DrainTimeout < 0:
			return fmt.Errorf("%w: drain timeout %v of daemon %q: want 0 (the default, %v) or more", ErrInvalidConfig, d.DrainTimeout, d.Name, DefaultDrainTimeout)
		case d.Health == nil && (d.HealthInterval != 0 || d.HealthFailures != 0):
			return fmt.Errorf("%w: daemon %q of node %q has a HealthInterval or HealthFailures but no Health check: set Health, or neither", ErrInvalidConfig, d.Name, cfg.Name)
		case d.HealthInterval < 0 || (d.HealthInterval > 0 && d.HealthInterval < election.MinHealthInterval):
			return fmt.Errorf("%w: health interval %v of daemon %q: want 0 (the default, %v) or at least %v", ErrInvalidConfig, d.HealthInterval, d.Name, DefaultHealthInterval, election.MinHealthInterval)
		case d.HealthFailures < 0:
			return fmt.Errorf("%w: health failures %d of daemon %q: want 0 (the default, %d) or more: the failed checks in a row that make the node stop offering it", ErrInvalidConfig, d.HealthFailures, d.Name, DefaultHealthFailures)
		}
		seen[d.Name] = true
	}
	return nil
}

// LossMargin is how long a daemon has to return once its context is
// cancelled because its node lost the daemon (cut off from the servers)
// rather than revoked it, on a fleet whose bucket has the given TTL: the
// node's validity deadline comes this long before the daemon's work deadline
// (election.WorkDeadline), the last moment before its key can age out and
// another node start it under the election's clock assumption. It is the
// election's work margin at the default campaign interval, which the fleet's
// elections use: 723 ms at a 10 s TTL.
func LossMargin(ttl time.Duration) time.Duration {
	return election.TimingFor(ttl, 0).WorkMargin()
}

// capacity returns the node's weight.
func (cfg *Config) capacity() int {
	return max(cfg.Capacity, 1)
}

// The node's record: the metadata of its node key's candidate record.
const (
	metaCapacity = "capacity"
	metaDaemons  = "daemons" // the names of the daemons it can run, comma-separated, sorted
	metaVersion  = "version"
	metaPriority = "priority"      // absent: 0, as from nodes older than priorities
	metaPrefer   = "prefer_higher" // "true", or absent
	metaLabel    = "label."        // followed by a label's name
	// metaHealth is "true" on the record of a node with a health-checked
	// daemon: its record changes while it is a member (what it offers), so
	// the other nodes read it again every shortWait.
	metaHealth = "health"
	// metaUnhealthy is followed by the name of a daemon the node lists but
	// does not offer, its health check failing: the value says why.
	metaUnhealthy = "unhealthy."
)

// metadata returns the node's record; unhealthy holds the daemons it does
// not offer, with why, and "daemons" lists only the others.
func (cfg *Config) metadata(unhealthy map[string]string) map[string]string {
	names := make([]string, 0, len(cfg.Daemons))
	checked := false
	for _, d := range cfg.Daemons {
		checked = checked || d.Health != nil
		if _, ok := unhealthy[d.Name]; !ok {
			names = append(names, d.Name)
		}
	}
	slices.Sort(names)
	m := map[string]string{
		metaCapacity: fmt.Sprint(cfg.capacity()),
		metaDaemons:  strings.Join(names, ","),
	}
	if checked {
		m[metaHealth] = "true"
	}
	for d, why := range unhealthy {
		m[metaUnhealthy+d] = why
	}
	if cfg.Version != "" {
		m[metaVersion] = cfg.Version
	}
	if cfg.Priority != 0 {
		m[metaPriority] = fmt.Sprint(cfg.Priority)
	}
	if cfg.PreferHigher {
		m[metaPrefer] = "true"
	}
	for k, v := range cfg.Labels {
		m[metaLabel+k] = v
	}
	return m
}

// fleetPriority is the election priority of every fleet election, node
// and daemon keys alike, given after the bucket's default options so that
// it overrides them. A node's Config.Priority acts through placement (who
// claims a free daemon, who hands one over), not through the elections:
// a bucket opened with election.WithPriority(0) for other elections would
// otherwise make the fleet's keys never claimable, and one opened with
// election.WithPreferHigher would hand a daemon over, outside placement
// and its drain, to a node of higher election priority that happened to
// campaign for it. With every fleet candidate at the same priority, the
// elections neither delay a claim nor hand a key over by preference.
var fleetPriority = election.WithPriority(election.DefaultPriority)
