package main

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

func TestPercentileIsNearestRank(t *testing.T) {
	var samples []time.Duration
	for i := 100; i >= 1; i-- {
		samples = append(samples, time.Duration(i)*time.Millisecond)
	}
	tests := []struct {
		p    float64
		want time.Duration
	}{
		{50, 50 * time.Millisecond},
		{99, 99 * time.Millisecond},
		{100, 100 * time.Millisecond},
		{0, 1 * time.Millisecond},
	}
	for _, tt := range tests {
		if got := percentile(samples, tt.p); got != tt.want {
			t.Errorf("percentile(1..100 ms, %v) = %v, want %v", tt.p, got, tt.want)
		}
	}
	if got := percentile([]time.Duration{3, 1, 2}, 99); got != 3 {
		t.Errorf("p99 of three samples = %v, want the largest", got)
	}
	if samples[0] != 100*time.Millisecond {
		t.Error("percentile reordered its input")
	}
}

func TestSummarizeCountsOverlapsAndScalesCrashByTTL(t *testing.T) {
	hang := result{sc: scenario{id: "connection-hang", overlap: true}}
	summarize(&hang, []time.Duration{0, 500 * time.Millisecond, 0, 250 * time.Millisecond}, 2*time.Second)
	if hang.Overlaps == nil || *hang.Overlaps != 2 || hang.MaxMs != 500 || hang.P99TTL != 0 {
		t.Errorf("hang summary = %+v, want 2 overlaps, max 500 ms, no ×TTL figures", hang)
	}

	crash := result{sc: scenario{id: "leader-crash", perTTL: true}}
	summarize(&crash, []time.Duration{1500 * time.Millisecond, 2100 * time.Millisecond}, 2*time.Second)
	if crash.P50TTL != 0.75 || crash.MaxTTL != 1.05 || crash.Overlaps != nil {
		t.Errorf("crash summary = %+v, want p50 0.75 × TTL, max 1.05 × TTL, no overlap count", crash)
	}
}

func TestTableShowsEveryResultAndFailure(t *testing.T) {
	crash := result{Scenario: "leader-crash", System: "etcd", sc: scenarios[2], Errors: []string{"round 1: boom"}}
	summarize(&crash, []time.Duration{1500 * time.Millisecond}, 2*time.Second)
	hang := result{Scenario: "connection-hang", System: "kvelect", sc: scenarios[3]}
	summarize(&hang, []time.Duration{0, 0}, 2*time.Second)
	var out bytes.Buffer
	if err := writeTable(&out, report{Rounds: 2, TTLMs: 2000, Procs: true, Results: []result{crash, hang}}); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"2 rounds, TTL 2s, 0 candidates, each in its own process (-procs),",
		"leader crash → next leader",
		"1500",
		"0.75",
		"0 of 2",
		"overlap per round, kvelect (ms): 0 0",
		"failed round: leader-crash on etcd: round 1: boom",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, out.String())
		}
	}
}
