package fleet

import (
	"testing"
	"time"

	"github.com/kvelect/election"
)

// TestADaemonThatRestartedRecentlyIsCrashLooping reads a daemon's record
// back, with the time of its latest restart, and tells a daemon that
// returned by itself less than a minute ago from one that has run since.
func TestADaemonThatRestartedRecentlyIsCrashLooping(t *testing.T) {
	now := time.Now()
	st := DaemonStatus{Name: "d", Node: "n", State: Running, Token: 7, Since: now.Add(-time.Hour),
		Restarts: 3, LastError: "command not found", Restarted: now.Add(-2 * time.Second)}
	got := daemonStatusOf("d", election.Candidate{Name: "n", Metadata: st.metadata()})
	if !got.Restarted.Equal(st.Restarted) || got.Restarts != 3 || got.LastError != st.LastError {
		t.Fatalf("read back %+v, want %+v", got, st)
	}
	if !got.CrashLooping(now) {
		t.Errorf("restarted 2s ago: not crash-looping")
	}
	if got.CrashLooping(now.Add(healthyRun)) {
		t.Errorf("restarted a minute ago: crash-looping")
	}
	got.State = Revoking
	if got.CrashLooping(now) {
		t.Errorf("revoking: crash-looping")
	}
	if never := (DaemonStatus{State: Running}); never.CrashLooping(now) || never.metadata()[metaRestart] != "" {
		t.Errorf("never restarted: crash-looping %v, record %v", never.CrashLooping(now), never.metadata())
	}
}
