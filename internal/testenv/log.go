package testenv

import (
	"log/slog"
	"sync"
	"testing"
)

// Logger returns a logger, at debug level, that writes to tb's output: shown
// when the test fails or runs with -v, so a failure comes with the library's
// account of what it did. Lines logged once tb's cleanups have run are
// dropped, since a goroutine of the code under test may outlive the test by
// a moment and the testing package panics on output after a test ends.
func Logger(tb testing.TB) *slog.Logger {
	w := &testOutput{tb: tb}
	tb.Cleanup(w.end)
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// testOutput writes to a test's output until the test ends.
type testOutput struct {
	mu    sync.Mutex
	tb    testing.TB
	ended bool
}

func (o *testOutput) Write(p []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.ended {
		return len(p), nil
	}
	return o.tb.Output().Write(p)
}

func (o *testOutput) end() {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.ended = true
}
