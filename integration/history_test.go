package integration

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kvelect/election"
	"github.com/kvelect/election/history"
	"github.com/kvelect/election/internal/testenv"
)

// historyOf opens the history of bucket on a connection of its own.
func historyOf(t *testing.T, url, bucket string) *history.History {
	t.Helper()
	_, js := testenv.Connect(t, url)
	h, err := history.Open(context.Background(), js, bucket)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// TestHistoryRecordsEveryChangeOnce runs three candidates that record their
// history through a stop, a key delete and a crash, and compares the
// history with what their callbacks saw: every win once, every stand-down
// of a live process once, and each win saying how the key became free.
func TestHistoryRecordsEveryChangeOnce(t *testing.T) {
	t.Parallel()
	s, admin := serverWithBucket(t, "HISTORY")
	_, js := testenv.Connect(t, s.ClientURL())
	if _, err := history.Create(context.Background(), js, "HISTORY", 0); err != nil {
		t.Fatal(err)
	}
	g := newGroup(t, "k")
	conns := map[string]func(){}
	for _, name := range []string{"a", "b", "c"} {
		nc, js := testenv.Connect(t, s.ClientURL())
		kv, err := js.KeyValue(context.Background(), "HISTORY")
		if err != nil {
			t.Fatal(err)
		}
		h, err := history.Open(context.Background(), js, "HISTORY")
		if err != nil {
			t.Fatal(err)
		}
		g.add(name, kv, election.WithEventHook(h.Record))
		conns[name] = nc.Close
	}
	var wins []event
	first := g.awaitWin()
	wins = append(wins, first)

	g.elections[first.name].Stop() // a release
	g.awaitLoss(first.name)
	second := g.awaitWin()
	wins = append(wins, second)

	if err := admin.Delete(context.Background(), "k"); err != nil { // the leader vouches
		t.Fatal(err)
	}
	g.awaitLoss(second.name)
	third := g.awaitWin()
	wins = append(wins, third)

	// A crash: its end goes unrecorded. (Its win is recorded a moment
	// after it; a leader that crashes within that moment leaves no record
	// of its win either.)
	h := historyOf(t, s.ClientURL(), "HISTORY")
	testenv.Eventually(t, "the third win recorded", awaitTimeout, func() bool {
		events, err := h.Events(context.Background(), "k", time.Time{})
		return err == nil && slices.ContainsFunc(events, func(ev history.Event) bool {
			return ev.Kind == history.Won && ev.Token == third.token
		})
	})
	conns[third.name]()
	fourth := g.awaitWin()
	wins = append(wins, fourth)

	want := map[string]int{}
	for i, w := range wins {
		want[fmt.Sprintf("won %s %d", w.name, w.token)]++
		if i < 2 { // the first two stood down in a live process
			want[fmt.Sprintf("stood_down %s %d", w.name, w.token)]++
		}
	}
	events := testenv.Poll(t, "the history to hold every event", awaitTimeout, func() ([]history.Event, bool) {
		events, err := h.Events(context.Background(), "k", time.Time{})
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]int{}
		for _, ev := range events {
			got[fmt.Sprintf("%s %s %d", ev.Kind, ev.Name, ev.Token)]++
		}
		for k, n := range want {
			if got[k] < n {
				return events, false
			}
		}
		return events, true
	})
	seen := map[string]bool{}
	for _, ev := range events {
		id := fmt.Sprintf("%s %s %d", ev.Kind, ev.Name, ev.Token)
		if seen[id] {
			t.Errorf("recorded twice: %s", id)
		}
		seen[id] = true
		if want[id] == 0 && !(ev.Kind == history.StoodDown && ev.Name == third.name) {
			t.Errorf("recorded %s, which did not happen", id)
		}
		if ev.At.IsZero() || ev.Key != "k" {
			t.Errorf("event %+v: want key k and a time", ev)
		}
	}
	after := map[uint64]string{}
	for _, ev := range events {
		if ev.Kind == history.Won {
			after[ev.Token] = ev.After
		}
	}
	for i, says := range []string{"no key", "released by " + first.name, "released by " + second.name, "no key"} {
		if got := after[wins[i].token]; got != says {
			t.Errorf("win %d (%s, token %d) recorded after %q, want %q", i+1, wins[i].name, wins[i].token, got, says)
		}
	}
	if stood := fmt.Sprintf("stood_down %s %d", second.name, second.token); seen[stood] {
		for _, ev := range events {
			if ev.Kind == history.StoodDown && ev.Token == second.token && !strings.Contains(ev.Cause, election.ErrRevisionGone.Error()) {
				t.Errorf("the deleted key's leader recorded cause %q, want %v", ev.Cause, election.ErrRevisionGone)
			}
		}
	}
}
