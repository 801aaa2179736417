package testenv

import (
	"fmt"
	"runtime"
	"testing"
	"time"
)

// fatalRecorder is a testing.TB whose Fatalf records its message and ends
// the goroutine, as the real one does, without failing the test.
type fatalRecorder struct {
	testing.TB
	msg string
}

func (r *fatalRecorder) Fatalf(format string, args ...any) {
	r.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// fatal runs f on a goroutine of its own with a fatalRecorder, and returns
// the message f failed with, or "" if it returned.
func fatal(t *testing.T, f func(tb testing.TB)) string {
	r := &fatalRecorder{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		f(r)
	}()
	<-done
	return r.msg
}

func TestEventuallyWaitsForTheCondition(t *testing.T) {
	checks := 0
	msg := fatal(t, func(tb testing.TB) {
		Eventually(tb, "the third check", time.Minute, func() bool { checks++; return checks == 3 })
	})
	if msg != "" || checks != 3 {
		t.Errorf("failed with %q after %d checks, want success at the third", msg, checks)
	}
}

func TestEventuallyFailsAfterTheTimeout(t *testing.T) {
	msg := fatal(t, func(tb testing.TB) {
		Eventually(tb, "the impossible", 30*time.Millisecond, func() bool { return false })
	})
	if want := "timed out after 30ms waiting for the impossible"; msg != want {
		t.Errorf("failed with %q, want %q", msg, want)
	}
}

func TestPollReturnsTheValueThatSatisfied(t *testing.T) {
	checks := 0
	var got int
	msg := fatal(t, func(tb testing.TB) {
		got = Poll(tb, "3", time.Minute, func() (int, bool) { checks++; return checks, checks == 3 })
	})
	if msg != "" || got != 3 {
		t.Errorf("Poll returned %d, failing with %q; want 3", got, msg)
	}
}

func TestPollFailsWithTheLastValueSeen(t *testing.T) {
	checks := 0
	msg := fatal(t, func(tb testing.TB) {
		Poll(tb, "the impossible", 30*time.Millisecond, func() (string, bool) {
			checks++
			return fmt.Sprintf("check %d", checks), false
		})
	})
	if want := fmt.Sprintf("timed out after 30ms waiting for the impossible; last saw: check %d", checks); msg != want || checks < 2 {
		t.Errorf("failed with %q after %d checks, want %q", msg, checks, want)
	}
}
