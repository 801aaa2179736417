package election

// State is where an election stands on this node.
type State uint

const (
	// UnknownState means the election is not running: before Start and after
	// it returns.
	UnknownState State = 0
	// CandidateState means the node campaigns but does not lead. A node that
	// won the key but is still waiting out its announce delay is a candidate.
	CandidateState State = 1
	// LeaderState means the node leads: it announced leadership and its
	// validity deadline has not passed.
	LeaderState State = 2
)

// String returns "unknown", "candidate" or "leader".
func (s State) String() string {
	switch s {
	case CandidateState:
		return "candidate"
	case LeaderState:
		return "leader"
	default:
		return "unknown"
	}
}
