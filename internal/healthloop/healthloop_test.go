package healthloop

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// verdicts runs Run with check until it has noted n verdicts, and returns
// them.
func verdicts(t *testing.T, interval time.Duration, n int, check func(context.Context) error) []error {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var mu sync.Mutex
	var got []error
	enough := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		Run(ctx, nil, interval, check, func(err error, _ time.Duration) {
			mu.Lock()
			defer mu.Unlock()
			if got = append(got, err); len(got) == n {
				close(enough)
			}
		})
	}()
	<-enough
	cancel()
	<-done
	mu.Lock()
	defer mu.Unlock()
	return got[:n]
}

// TestACheckThatTimesOutFailsOnce: a call that honours its context and
// hangs to the end of its interval is one failure, between two passes.
func TestACheckThatTimesOutFailsOnce(t *testing.T) {
	var calls atomic.Int32
	got := verdicts(t, 30*time.Millisecond, 3, func(ctx context.Context) error {
		if calls.Add(1) == 2 {
			<-ctx.Done()
			return ctx.Err()
		}
		return nil
	})
	if got[0] != nil || got[1] == nil || got[2] != nil {
		t.Errorf("verdicts %v, want pass, one failure, pass", got)
	}
}

// TestAWedgedCheckFailsAtEachInterval: a call that ignores its context
// fails at each interval while it runs, and no second call starts.
func TestAWedgedCheckFailsAtEachInterval(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	var calls atomic.Int32
	got := verdicts(t, 20*time.Millisecond, 3, func(context.Context) error {
		calls.Add(1)
		<-release
		return nil
	})
	for i, err := range got {
		if err == nil || !strings.Contains(err.Error(), "has not returned") {
			t.Errorf("verdict %d: %v, want a failure of a check that has not returned", i, err)
		}
	}
	if n := calls.Load(); n != 1 {
		t.Errorf("%d calls while the first ran, want 1", n)
	}
}

// TestALateNilFails: a call that returns nil after its time failed.
func TestALateNilFails(t *testing.T) {
	got := verdicts(t, 20*time.Millisecond, 1, func(ctx context.Context) error {
		<-ctx.Done()
		return nil
	})
	if got[0] == nil || errors.Is(got[0], context.DeadlineExceeded) {
		t.Errorf("verdict %v, want the failure of a nil returned late", got[0])
	}
}
