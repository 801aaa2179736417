package history

import "github.com/kvelect/election"

// CurrentWin returns the recorded win of l's current tenure: among events,
// the key's events oldest first (events of other keys are skipped), the
// latest win of l.Name with a token no later than l.Revision, l's latest
// write. A stand-down of l.Name after that win and no later than l.Revision
// means the current tenure began after it and is not recorded yet (its
// record is late, or was lost): CurrentWin then returns false, as it does
// when nobody holds the key or the history holds no such win.
//
// The status command and the dashboard show a leader's fencing token and
// since when it has led by this rule.
func CurrentWin(l election.Leader, events []Event) (Event, bool) {
	if l.Name == "" {
		return Event{}, false
	}
	for i := len(events) - 1; i >= 0; i-- {
		ev := events[i]
		switch {
		case ev.Key != l.Key || ev.Name != l.Name || ev.Token > l.Revision:
		case ev.Kind == StoodDown:
			return Event{}, false
		case ev.Kind == Won:
			return ev, true
		}
	}
	return Event{}, false
}
