package history_test

import (
	"fmt"

	"github.com/kvelect/election"
	"github.com/kvelect/election/history"
)

// CurrentWin finds when the key's leader won, from the events Events
// returns: a stand-down after its last recorded win means the current
// tenure is not recorded (yet).
func ExampleCurrentWin() {
	events := []history.Event{
		{Key: "scheduler", Name: "replica-1", Kind: history.Won, Token: 3},
		{Key: "scheduler", Name: "replica-1", Kind: history.StoodDown, Token: 3},
		{Key: "scheduler", Name: "replica-2", Kind: history.Won, Token: 7, After: "released by replica-1"},
	}
	for _, l := range []election.Leader{
		{Key: "scheduler", Name: "replica-2", Revision: 9},  // renewed since its win at 7
		{Key: "scheduler", Name: "replica-1", Revision: 12}, // won again; that win is not recorded
	} {
		if ev, ok := history.CurrentWin(l, events); ok {
			fmt.Printf("%s leads with token %d, %s\n", l.Name, ev.Token, ev.After)
		} else {
			fmt.Printf("%s leads; its win is not recorded\n", l.Name)
		}
	}
	// Output:
	// replica-2 leads with token 7, released by replica-1
	// replica-1 leads; its win is not recorded
}
