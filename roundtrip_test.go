package election

import (
	"testing"
	"time"
)

// TestSuggestedTTLFitsFourRoundTripsInTheRenewalWindow checks the rule of
// docs/topologies.md: at the default interval the renewal window is TTL/8,
// so the smallest TTL is 32 round trips, in whole seconds, at least MinTTL.
func TestSuggestedTTLFitsFourRoundTripsInTheRenewalWindow(t *testing.T) {
	def := newTiming(10*time.Second, 0)
	short := newTiming(30*time.Second, 10*time.Second) // window (30−10)/2 = 10 s, a third of the TTL
	tests := []struct {
		rtt  time.Duration
		t    timing
		want time.Duration
	}{
		{time.Millisecond, def, MinTTL},
		{50 * time.Millisecond, def, MinTTL},
		{150 * time.Millisecond, def, 5 * time.Second},
		{300 * time.Millisecond, def, 10 * time.Second},
		{301 * time.Millisecond, def, 10 * time.Second},
		{320 * time.Millisecond, def, 11 * time.Second},
		{time.Second, short, 12 * time.Second},
	}
	for _, tt := range tests {
		if got := suggestedTTL(tt.rtt, tt.t); got != tt.want {
			t.Errorf("suggestedTTL(%v) at TTL %v, interval %v = %v, want %v", tt.rtt, tt.t.ttl, tt.t.interval, got, tt.want)
		}
	}
}

// TestRoundTripsWarnOnceInAWhileAndKeepTheWorst checks the warning's limit
// and that worst forgets a slow call once 16 others came after it.
func TestRoundTripsWarnOnceInAWhileAndKeepTheWorst(t *testing.T) {
	var r roundTrips
	const budget = 100 * time.Millisecond
	if r.worst() != 0 {
		t.Errorf("worst before any call = %v, want 0", r.worst())
	}
	if r.observe(budget, budget) {
		t.Error("a round trip of exactly the budget warned")
	}
	if !r.observe(3*budget, budget) {
		t.Error("the first round trip above the budget did not warn")
	}
	if r.observe(4*budget, budget) {
		t.Error("a second round trip above the budget warned at once again")
	}
	if got := r.worst(); got != 4*budget {
		t.Errorf("worst = %v, want %v", got, 4*budget)
	}
	for range roundTripSamples {
		r.observe(time.Millisecond, budget)
	}
	if got := r.worst(); got != time.Millisecond {
		t.Errorf("worst after %d fast calls = %v, want 1ms", roundTripSamples, got)
	}
	r.warnedAt = time.Now().Add(-roundTripWarnEvery)
	if !r.observe(2*budget, budget) {
		t.Errorf("a round trip above the budget did not warn %v after the last warning", roundTripWarnEvery)
	}
}
