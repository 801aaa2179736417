package cli

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/kvelect/election/history"
)

// A run of election run --once is two records in the history: its start
// (run_started, written as the job starts, after the check for a done
// mark) and its outcome (ran). election history prints a run as one line,
// at its start, with its status, how long it ran and the done mark it
// left; a start without an outcome as a run whose end nobody recorded.

// historyLine is one line of election history: an event, or a run.
type historyLine struct {
	at     time.Time
	ev     history.Event
	detail string
}

// printedLines turns the events into lines, a run's two records into one,
// in order of when each line's event (a run's start) happened.
func printedLines(events []history.Event) []historyLine {
	ended := map[[2]string]bool{} // runs with an outcome, by name and token
	for _, ev := range events {
		if ev.Kind == history.Ran {
			ended[runID(ev)] = true
		}
	}
	var lines []historyLine
	for _, ev := range events {
		l := historyLine{at: ev.At, ev: ev}
		switch ev.Kind {
		case history.RunStarted:
			if ended[runID(ev)] {
				continue
			}
			l.detail = "no outcome recorded: still running, or its host died or was cut off"
		case history.Ran:
			l.at, l.detail = ev.Started(), runDetail(ev)
		case history.StoodDown:
			l.detail = strings.TrimPrefix(ev.Cause, "election: ")
		default:
			l.detail = ev.After
		}
		if ev.Late {
			l.detail += fmt.Sprintf(" (recorded %v late)", ev.Delay.Round(time.Millisecond))
		}
		lines = append(lines, l)
	}
	slices.SortStableFunc(lines, func(a, b historyLine) int { return a.at.Compare(b.at) })
	return lines
}

func runID(ev history.Event) [2]string { return [2]string{ev.Name, fmt.Sprint(ev.Token)} }

// runDetail says how a run ended: its status, how long it ran, why it
// failed, and the done mark it left.
func runDetail(ev history.Event) string {
	d := fmt.Sprintf("status %d after %v", ev.Status, ev.Duration.Round(time.Millisecond))
	if ev.Error != "" {
		d += ": " + strings.TrimPrefix(ev.Error, "election: ")
	}
	if ev.Interrupted {
		d += " (interrupted: its leadership ended first)"
	}
	if run := ev.Run(); !run.MarkUntil().IsZero() {
		d += fmt.Sprintf("; done for %s, until %s", formatSpan(ev.DoneFor), run.MarkUntil().Local().Format("2006-01-02 15:04:05"))
	}
	return d
}
