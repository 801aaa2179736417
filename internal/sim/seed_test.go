package sim

import (
	"os"
	"strconv"
	"testing"
	"time"
)

// TestReplay runs the one seed SEED names, and prints its report: the
// schedule, what it found and how long it took.
func TestReplay(t *testing.T) {
	s := os.Getenv("SEED")
	if s == "" {
		t.Skip("SEED names the seed to replay")
	}
	seed, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	wall := time.Now()
	res := RunSeed(t, seed, 10*time.Minute)
	Report(&testWriter{t}, res)
	t.Logf("simulated %v in %v, faults %v", res.Simulated, time.Since(wall), res.Faults)
	if len(res.Violations) > 0 {
		t.Fail()
	}
}
