package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// result is what one scenario measured on one system over all rounds.
type result struct {
	Scenario string `json:"scenario"`
	System   string `json:"system"`
	// SamplesMs holds one figure per successful round, in round order: the
	// time to the next leader, or for the connection-hang scenario the
	// overlap of the two leaders.
	SamplesMs []float64 `json:"samples_ms"`
	P50Ms     float64   `json:"p50_ms"`
	P99Ms     float64   `json:"p99_ms"`
	MaxMs     float64   `json:"max_ms"`
	// P50TTL, P99TTL and MaxTTL are the same figures as multiples of the
	// TTL, for the leader-crash scenario only.
	P50TTL float64 `json:"p50_ttl,omitempty"`
	P99TTL float64 `json:"p99_ttl,omitempty"`
	MaxTTL float64 `json:"max_ttl,omitempty"`
	// Overlaps counts the rounds with two leaders at once, for the
	// connection-hang scenario only.
	Overlaps *int `json:"overlaps,omitempty"`
	// Errors holds why rounds failed.
	Errors []string `json:"errors,omitempty"`

	sc scenario
}

// report is the whole run, as -json prints it.
type report struct {
	Rounds     int     `json:"rounds"`
	TTLMs      float64 `json:"ttl_ms"`
	Candidates int     `json:"candidates"`
	Seed       uint64  `json:"seed"`
	// Procs says each candidate ran in its own process (-procs).
	Procs       bool     `json:"procs"`
	CPUs        int      `json:"cpus"`
	GoVersion   string   `json:"go_version"`
	NATSVersion string   `json:"nats_server_version"`
	EtcdVersion string   `json:"etcd_version"`
	Results     []result `json:"results"`
}

// summarize fills in the figures of r from samples, taken at the given TTL.
func summarize(r *result, samples []time.Duration, ttl time.Duration) {
	sc := r.sc
	r.SamplesMs = make([]float64, len(samples))
	for i, s := range samples {
		r.SamplesMs[i] = ms(s)
	}
	if len(samples) == 0 {
		return
	}
	r.P50Ms = ms(percentile(samples, 50))
	r.P99Ms = ms(percentile(samples, 99))
	r.MaxMs = ms(slices.Max(samples))
	if sc.perTTL {
		r.P50TTL = round2(r.P50Ms / ms(ttl))
		r.P99TTL = round2(r.P99Ms / ms(ttl))
		r.MaxTTL = round2(r.MaxMs / ms(ttl))
	}
	if sc.overlap {
		n := 0
		for _, s := range samples {
			if s > 0 {
				n++
			}
		}
		r.Overlaps = &n
	}
}

// percentile returns the nearest-rank p-th percentile of samples, which must
// not be empty: the smallest sample at least p% of the samples do not exceed.
func percentile(samples []time.Duration, p float64) time.Duration {
	sorted := slices.Sorted(slices.Values(samples))
	rank := int(math.Ceil(p / 100 * float64(len(sorted))))
	return sorted[max(rank, 1)-1]
}

func ms(d time.Duration) float64 { return round2(float64(d) / float64(time.Millisecond)) }

func round2(x float64) float64 { return math.Round(x*100) / 100 }

// writeJSON prints the report as indented JSON.
func writeJSON(w io.Writer, rep report) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(rep)
}

// writeTable prints the report as a table, then the overlap of every round
// of the connection-hang scenario and any failed rounds.
func writeTable(w io.Writer, rep report) error {
	where := " in this process"
	if rep.Procs {
		where = ", each in its own process (-procs)"
	}
	fmt.Fprintf(w, "%d rounds, TTL %v, %d candidates%s, seed %d; %d CPUs, %s, nats-server %s, etcd %s\n\n",
		rep.Rounds, time.Duration(rep.TTLMs*float64(time.Millisecond)), rep.Candidates, where, rep.Seed,
		rep.CPUs, rep.GoVersion, rep.NATSVersion, rep.EtcdVersion)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "scenario\tsystem\trounds\tp50 ms\tp99 ms\tmax ms\tp50 ×TTL\tp99 ×TTL\tmax ×TTL\trounds with overlap\t")
	for _, r := range rep.Results {
		sc := r.sc
		perTTL := []string{"–", "–", "–"}
		if sc.perTTL {
			perTTL = []string{num(r.P50TTL), num(r.P99TTL), num(r.MaxTTL)}
		}
		overlaps := "–"
		if r.Overlaps != nil {
			overlaps = fmt.Sprintf("%d of %d", *r.Overlaps, len(r.SamplesMs))
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", sc.title, r.System, len(r.SamplesMs),
			num(r.P50Ms), num(r.P99Ms), num(r.MaxMs), perTTL[0], perTTL[1], perTTL[2], overlaps)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, r := range rep.Results {
		if r.sc.overlap {
			fmt.Fprintf(w, "\noverlap per round, %s (ms): %s", r.System, joinNums(r.SamplesMs))
		}
	}
	fmt.Fprintln(w)
	for _, r := range rep.Results {
		for _, e := range r.Errors {
			fmt.Fprintf(w, "failed round: %s on %s: %s\n", r.Scenario, r.System, e)
		}
	}
	return nil
}

// num formats a figure with at most two decimals and no trailing zeros.
func num(x float64) string {
	s := fmt.Sprintf("%.2f", x)
	s = strings.TrimRight(s, "0")
	return strings.TrimSuffix(s, ".")
}

func joinNums(xs []float64) string {
	parts := make([]string, len(xs))
	for i, x := range xs {
		parts[i] = num(x)
	}
	return strings.Join(parts, " ")
}
