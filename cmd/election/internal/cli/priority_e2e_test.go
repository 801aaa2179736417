//go:build linux

package cli

import (
	"fmt"
	"os"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/kvelect/election/cmd/election/internal/e2e"
	"github.com/kvelect/election/internal/testenv"
	"github.com/nats-io/nats.go/jetstream"
)

// TestRunHighestPriorityLeadsWhenStartedTogether starts three election run processes of
// priorities 1, 2 and 3 at one instant on a free key, 20 times (a fresh key
// each time): the command runs on priority 3 every time, whoever ran it
// first, and keeps running there once the other two have stopped.
func TestRunHighestPriorityLeadsWhenStartedTogether(t *testing.T) {
	t.Parallel()
	const (
		tries = 20
		ttl   = 2 * time.Second // the shortest the command allows
		// Priority 3 leads a tenth of the TTL after it is listed, or by a
		// handover right after; one it does not reach within a TTL of the
		// start has lost to a lower one for good.
		settle = ttl
	)
	bin := e2e.BuildElection(t)
	s := testenv.Server(t)
	_, js := testenv.Connect(t, s.ClientURL())
	testenv.Bucket(t, js, jetstream.KeyValueConfig{Bucket: "PRIO", TTL: ttl})
	firstHighest, failed := 0, 0
	began := time.Now()
	for try := range tries {
		key := fmt.Sprintf("start%d", try)
		starts, cmd := recordedStarts(t)
		daemons := make([]*e2e.Process, 3)
		for i := range daemons {
			daemons[i] = e2e.PrepareProcess(t, bin, fmt.Sprintf("p%d", i+1), "run", "--name", fmt.Sprintf("p%d", i+1), "--log-format", "json",
				"--server", s.ClientURL(), "--bucket", "PRIO", "--key", key, "--priority", fmt.Sprint(i+1), "--", cmd[0], cmd[1], cmd[2])
		}
		release := make(chan struct{})
		var started sync.WaitGroup
		errs := make([]error, len(daemons))
		for i, d := range daemons {
			started.Go(func() {
				<-release
				errs[i] = d.Start()
			})
		}
		close(release)
		started.Wait()
		for _, err := range errs {
			if err != nil {
				t.Fatal(err)
			}
		}

		// The command records each start; wait for priority 3's.
		var seen []e2e.Started
		deadline := time.Now().Add(settle)
		for ; !time.Now().After(deadline); <-time.After(10 * time.Millisecond) {
			data, _ := os.ReadFile(starts)
			if seen = e2e.ParseStarts(data); len(seen) > 0 && seen[len(seen)-1].Name == "p3" {
				break
			}
		}
		highest := len(seen) > 0 && seen[len(seen)-1].Name == "p3"
		if len(seen) > 0 && seen[0].Name == "p3" {
			firstHighest++
		}
		// Stop the lower ones first: once priority 3 ran the command, no
		// other may have started it after.
		for _, d := range daemons[:2] {
			d.Cmd.Process.Signal(syscall.SIGTERM)
		}
		for _, d := range daemons[:2] {
			d.Wait(t)
		}
		data, _ := os.ReadFile(starts)
		all := e2e.ParseStarts(data)
		var names []string
		for _, s := range all {
			names = append(names, s.Name)
		}
		if last := all[len(all)-1:]; !highest || len(last) == 0 || last[0].Name != "p3" || !testenv.Alive(last[0].PID) {
			failed++
			t.Errorf("try %d: the command started on %v: want it on p3 within %v, and running there still once p1 and p2 stopped", try, names, settle)
		} else {
			t.Logf("try %d: the command started on %v", try, names)
		}
		daemons[2].Cmd.Process.Signal(syscall.SIGTERM)
		daemons[2].Wait(t)
	}
	t.Logf("priority 3 ran the command in %d of %d tries, first in %d; %v", tries-failed, tries, firstHighest, time.Since(began).Round(time.Millisecond))
}
