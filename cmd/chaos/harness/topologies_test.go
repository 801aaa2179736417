//go:build unix

package harness

import (
	"slices"
	"testing"
)

// TestLeastLoadedSpreadsWorkersOverTheRegions checks the placement of new
// workers: the first ones in turn, a replacement where one is missing.
func TestLeastLoadedSpreadsWorkersOverTheRegions(t *testing.T) {
	regions := []string{"C1", "C2", "C3"}
	load := map[string]int{}
	var got []string
	for range 4 {
		r := regions[leastLoaded(regions, load)]
		load[r]++
		got = append(got, r)
	}
	if want := []string{"C1", "C2", "C3", "C1"}; !slices.Equal(got, want) {
		t.Errorf("first workers in %v, want %v", got, want)
	}
	if r := regions[leastLoaded(regions, map[string]int{"C1": 1, "C2": 0, "C3": 1})]; r != "C2" {
		t.Errorf("a replacement for C2's worker goes to %s", r)
	}
}
