package sidecar

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
)

// TestLeaderFileFollowsLeadership holds the file for two leaderships: one
// that ends (its context is cancelled) and one whose holder returns first.
// The file holds the token while held, is gone after each, and nothing else
// is left in its directory.
func TestLeaderFileFollowsLeadership(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	f := &LeaderFile{path: filepath.Join(dir, "leader"), log: quietLog()}
	held := func(want string) {
		t.Helper()
		got, err := os.ReadFile(f.path)
		if err != nil || string(got) != want {
			t.Errorf("the leader file holds %q (%v), want %q", got, err, want)
		}
	}
	gone := func() {
		t.Helper()
		if _, err := os.Stat(f.path); !os.IsNotExist(err) {
			t.Errorf("the leader file is there after leadership ended: %v", err)
		}
		if entries, _ := os.ReadDir(dir); len(entries) != 0 {
			t.Errorf("left in the directory: %v", entries)
		}
	}

	leading, end := context.WithCancel(context.Background())
	drop := f.Hold(leading, 7)
	held("7\n")
	end() // leadership ends: the file goes without waiting for drop
	drop()
	gone()

	drop = f.Hold(context.Background(), 12)
	held("12\n")
	drop()
	gone()
}

// quietLog returns a logger that writes nothing.
func quietLog() *slog.Logger { return slog.New(slog.DiscardHandler) }

// TestLeaderFileClearRemovesALeftFile removes the file a killed leader
// would leave, and accepts no file at all.
func TestLeaderFileClearRemovesALeftFile(t *testing.T) {
	t.Parallel()
	f := &LeaderFile{path: filepath.Join(t.TempDir(), "leader"), log: quietLog()}
	if err := f.clear(); err != nil {
		t.Errorf("clear without a file: %v", err)
	}
	if err := os.WriteFile(f.path, []byte("3\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := f.clear(); err != nil {
		t.Errorf("clear: %v", err)
	}
	if _, err := os.Stat(f.path); !os.IsNotExist(err) {
		t.Errorf("the file left from before is still there: %v", err)
	}
}

// TestCheckLeaderFileRefusesAnUnwritableDirectory runs only as a user whose
// writes the permission bits stop (root's are not).
func TestCheckLeaderFileRefusesAnUnwritableDirectory(t *testing.T) {
	t.Parallel()
	if os.Geteuid() == 0 {
		t.Skip("root writes in a read-only directory")
	}
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o555); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Chmod(dir, 0o755) })
	err := CheckLeaderFile(filepath.Join(dir, "leader"))
	if err == nil || err.Error() != `cannot create files in "`+dir+`": permission denied` {
		t.Errorf("CheckLeaderFile in a read-only directory: %v", err)
	}
}
