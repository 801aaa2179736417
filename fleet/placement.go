package fleet

import (
	"slices"
	"strings"
	"time"
)

// A placement is computed by every node from what its bucket's watcher
// shows, so nodes that have seen the same writes compute the same one. It
// decides only who claims a free daemon first and which daemons a node
// hands back; who runs a daemon is decided by its election alone.

// placeNode is a live member as placement sees it.
type placeNode struct {
	name     string
	capacity int
	canRun   map[string]bool
	// priority ranks the member (Config.Priority): a daemon runs on the
	// members of the highest priority that can run it.
	priority int
	// preferHigher: the member gives its daemons to members of higher
	// priority (Config.PreferHigher); without it, it keeps them.
	preferHigher bool
}

// placeInput is what placement starts from.
type placeInput struct {
	nodes   []placeNode
	daemons []string          // every daemon some member can run, sorted
	holders map[string]string // daemon → the node holding it (member or not); free daemons are absent
	// previous holds the node that held a daemon now free: it gets the
	// daemon back only if no other member can run it, so a node that hands
	// a daemon over, or crashed, is not chosen for it again.
	previous map[string]string
	// since holds when the computing node started each daemon it runs:
	// a node that gives daemons away gives its newest first.
	since map[string]time.Time
}

// place returns, for every daemon some member can run, the member that
// should run it: a daemon held by a member stays where it is unless that
// member runs more than its share; a free daemon goes to the capable
// member with the lowest load for its capacity. A daemon held by a node that
// is not a member is left out: it is not free, and no member may take it.
//
// Priorities narrow the choice: a daemon's eligible members are those of
// the highest priority among the members that can run it. A free daemon
// goes only to an eligible member, and daemons move for balance only from
// an eligible member to another. A daemon held by a member of lower
// priority than its eligible ones (a higher one joined after it started)
// stays there, and never moves for balance, unless its holder prefers
// higher priorities: then it is placed as if it were free, on an eligible
// member, and its holder hands it over. With every priority equal (the
// default), every capable member is eligible.
//
// Loads compare as load/capacity. After the free daemons are placed, a
// daemon moves from the most loaded member to a capable less loaded one as
// long as the move leaves the receiver below the giver's load before it:
// with equal capacities, until every member runs ⌊D/N⌋ or ⌈D/N⌉ daemons;
// with unequal ones, until each is within one daemon of its share. Only
// those daemons move, so a join moves only the excess, and a leave only the
// leaver's daemons.
func place(in placeInput) map[string]string {
	slots := make([]slot, len(in.nodes))
	members := make(map[string]*slot, len(in.nodes))
	for i := range in.nodes {
		slots[i].placeNode = &in.nodes[i]
		members[in.nodes[i].name] = &slots[i]
	}
	el := newEligibility(in.nodes, in.daemons)
	target := make(map[string]string, len(in.daemons))
	var free []string
	for _, d := range in.daemons {
		holder, held := in.holders[d]
		h := members[holder]
		switch {
		case !held:
			free = append(free, d)
		case h != nil && h.canRun[d] && h.preferHigher && !el.of(h, d):
			free = append(free, d) // to a member of higher priority: its holder hands it over
		case h != nil && h.canRun[d]:
			target[d] = holder
			h.load++
		}
	}

	for _, d := range free {
		var best *slot
		for i := range slots {
			n := &slots[i]
			if !el.of(n, d) {
				continue
			}
			if best == nil || better(n, best, in.previous[d]) {
				best = n
			}
		}
		if best != nil {
			target[d] = best.name
			best.load++
		}
	}

	// Move one daemon at a time from the most loaded member that has one a
	// less loaded member can take, while that improves the spread.
	h := newHoldings(target, in.since)
	for {
		from, to, d := heaviestMove(slots, h, el)
		if d == "" {
			return target
		}
		target[d] = to.name
		from.load--
		to.load++
		h.move(d, from.name, to.name)
	}
}

// eligibility tells which members may run a daemon by their priority.
type eligibility struct {
	// top maps each daemon to the highest priority of the members that can
	// run it; nil when every member has the same priority, and every
	// capable member is eligible.
	top map[string]int
}

// newEligibility finds, for each daemon, the highest priority of the
// members that can run it: the first capable member by descending
// priority. With equal priorities (the default) it computes nothing: a
// fleet without priorities pays nothing for them.
func newEligibility(nodes []placeNode, daemons []string) eligibility {
	uniform := true
	for i := range nodes {
		uniform = uniform && nodes[i].priority == nodes[0].priority
	}
	if uniform {
		return eligibility{}
	}
	byPriority := make([]*placeNode, len(nodes))
	for i := range nodes {
		byPriority[i] = &nodes[i]
	}
	slices.SortStableFunc(byPriority, func(a, b *placeNode) int { return b.priority - a.priority })
	el := eligibility{top: make(map[string]int, len(daemons))}
	for _, d := range daemons {
		for _, n := range byPriority {
			if n.canRun[d] {
				el.top[d] = n.priority
				break
			}
		}
	}
	return el
}

// of reports whether the member n may run daemon d: it can, and no member
// of higher priority can.
func (el eligibility) of(n *slot, d string) bool {
	return n.canRun[d] && (el.top == nil || n.priority == el.top[d])
}

// slot is a member and the number of daemons placement gives it so far.
type slot struct {
	*placeNode
	load int
}

// ratio is the member's load for its capacity, with extra more daemons.
func (s *slot) ratio(extra int) float64 { return float64(s.load+extra) / float64(s.capacity) }

// holdings are the daemons placement gives each member, each member's in
// the order it gives them away: the newest it started last, then by name.
type holdings struct {
	since  map[string]time.Time
	held   map[string][]string
	sorted map[string]bool // whether a member's list is in order
}

func newHoldings(target map[string]string, since map[string]time.Time) *holdings {
	h := &holdings{since: since, held: map[string][]string{}, sorted: map[string]bool{}}
	for daemon, node := range target {
		h.held[node] = append(h.held[node], daemon)
	}
	return h
}

// of returns the member's daemons in order.
func (h *holdings) of(node string) []string {
	if !h.sorted[node] {
		slices.SortFunc(h.held[node], func(a, b string) int {
			if c := h.since[a].Compare(h.since[b]); c != 0 {
				return c
			}
			return strings.Compare(a, b)
		})
		h.sorted[node] = true
	}
	return h.held[node]
}

func (h *holdings) move(d, from, to string) {
	held := h.held[from]
	for i := len(held) - 1; i >= 0; i-- { // a member gives its last daemons first
		if held[i] == d {
			h.held[from] = slices.Delete(held, i, i+1)
			break
		}
	}
	h.held[to] = append(h.held[to], d)
	h.sorted[to] = false
}

// better reports whether n should take a free daemon before best: not its
// previous holder, then the lower load after taking it, then the name.
func better(n, best *slot, previous string) bool {
	if (n.name == previous) != (best.name == previous) {
		return best.name == previous
	}
	if rn, rb := n.ratio(1), best.ratio(1); rn != rb {
		return rn < rb
	}
	return n.name < best.name
}

// heaviestMove finds the move that relieves the most loaded member: one of
// its daemons (the newest it started, then the last by name) to the least
// loaded member that may run it, if that member would stay below the
// giver's load. Only a daemon the giver may run by its priority moves: one
// kept on a member of lower priority stays there. It returns d == "" if no
// move improves the spread.
func heaviestMove(slots []slot, h *holdings, el eligibility) (from, to *slot, d string) {
	byLoad := make([]*slot, len(slots))
	for i := range slots {
		byLoad[i] = &slots[i]
	}
	slices.SortFunc(byLoad, func(a, b *slot) int {
		if ra, rb := a.ratio(0), b.ratio(0); ra != rb {
			if ra > rb {
				return -1
			}
			return 1
		}
		return strings.Compare(a.name, b.name)
	})
	receivers := make([]*slot, 0, len(slots))
	for _, giver := range byLoad {
		// The members that would stay below the giver's load, least loaded
		// first: none, and no daemon of the giver can move. A daemon moves
		// only between members it may run on, which share its top priority:
		// the giver's.
		receivers = receivers[:0]
		for _, n := range slices.Backward(byLoad) {
			if n != giver && n.priority == giver.priority && n.ratio(1) < giver.ratio(0) {
				receivers = append(receivers, n)
			}
		}
		if len(receivers) == 0 {
			continue
		}
		daemons := h.of(giver.name)
		for i := len(daemons) - 1; i >= 0; i-- {
			if !el.of(giver, daemons[i]) {
				continue
			}
			for _, n := range receivers {
				if el.of(n, daemons[i]) {
					return giver, n, daemons[i]
				}
			}
		}
	}
	return nil, nil, ""
}
