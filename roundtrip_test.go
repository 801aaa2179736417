package election

import (
	"testing"
	"time"
)

// TestSuggestedTTLFitsFourRoundTripsInTheRenewalWindow checks the rule of
// docs/topologies.md: at the default interval the renewal window is about a
// tenth of the TTL less 48 ms, so the smallest TTL is about 40 round trips
// plus half a second, in whole seconds, at least MinTTL.
func TestSuggestedTTLFitsFourRoundTripsInTheRenewalWindow(t *testing.T) {
	t.Parallel()
	def := defaultTiming(10 * time.Second)
	short := newTiming(30*time.Second, 10*time.Second) // window 9.2 s, at an interval a third of the TTL
	tests := []struct {
		rtt  time.Duration
		t    timing
		want time.Duration
	}{
		{time.Millisecond, def, MinTTL},
		{38 * time.Millisecond, def, MinTTL},
		{50 * time.Millisecond, def, 3 * time.Second},
		{150 * time.Millisecond, def, 7 * time.Second},
		{300 * time.Millisecond, def, 13 * time.Second},
		{320 * time.Millisecond, def, 14 * time.Second},
		{time.Second, short, 14 * time.Second},
	}
	for _, tt := range tests {
		if got := suggestedTTL(tt.rtt, tt.t); got != tt.want {
			t.Errorf("suggestedTTL(%v) at TTL %v, interval %v = %v, want %v", tt.rtt, tt.t.ttl, tt.t.interval, got, tt.want)
		}
	}
}

// TestRoundTripsWarnOnceInAWhileOnTheMedian checks that the warning
// follows the median of the recent round trips, not one spike, at most once
// in roundTripWarnEvery, and that the median forgets calls 16 calls old.
func TestRoundTripsWarnOnceInAWhileOnTheMedian(t *testing.T) {
	t.Parallel()
	var r roundTrips
	const budget = 100 * time.Millisecond
	now := time.Now() // the clock stands still: only the warning's spacing moves it
	if r.median() != 0 {
		t.Errorf("median before any call = %v, want 0", r.median())
	}
	for range 5 {
		r.add(time.Millisecond, budget, now)
	}
	if r.add(10*budget, budget, now) {
		t.Error("one spike among fast calls warned")
	}
	if got := r.median(); got != time.Millisecond {
		t.Errorf("median after one spike = %v, want 1ms", got)
	}
	warned := 0
	for range roundTripSamples {
		if r.add(3*budget, budget, now) {
			warned++
		}
	}
	if warned != 1 {
		t.Errorf("%d warnings over %d slow calls, want 1", warned, roundTripSamples)
	}
	if got := r.median(); got != 3*budget {
		t.Errorf("median after %d slow calls = %v, want %v: the older calls are forgotten", roundTripSamples, got, 3*budget)
	}
	now = now.Add(roundTripWarnEvery)
	if !r.add(3*budget, budget, now) {
		t.Errorf("a median above the budget did not warn %v after the last warning", roundTripWarnEvery)
	}
}
