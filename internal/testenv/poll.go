package testenv

import (
	"testing"
	"time"
)

// pollInterval is how long Eventually and Poll wait between two checks.
const pollInterval = 10 * time.Millisecond

// Eventually checks cond every few milliseconds until it holds, and fails
// the test, saying it timed out waiting for what, if it still does not
// after timeout. It is for conditions that no event announces: where there
// is an event, await it instead.
func Eventually(tb testing.TB, what string, timeout time.Duration, cond func() bool) {
	tb.Helper()
	if !poll(timeout, cond) {
		tb.Fatalf("timed out after %v waiting for %s", timeout, what)
	}
}

// Poll is Eventually for a check that also returns what it saw: it calls
// try every few milliseconds until try reports done, and returns the value
// try returned then. If try is still not done after timeout, Poll fails the
// test, saying it timed out waiting for what, with the last value seen.
func Poll[T any](tb testing.TB, what string, timeout time.Duration, try func() (seen T, done bool)) T {
	tb.Helper()
	var seen T
	if !poll(timeout, func() bool {
		var done bool
		seen, done = try()
		return done
	}) {
		tb.Fatalf("timed out after %v waiting for %s; last saw: %v", timeout, what, seen)
	}
	return seen
}

// poll checks cond every pollInterval until it holds, and reports whether
// it did; it returns false once cond fails after timeout has passed.
func poll(timeout time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(pollInterval)
	}
	return true
}
