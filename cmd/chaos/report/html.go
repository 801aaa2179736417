//go:build unix

package report

import (
	"fmt"
	"html"
	"os"
	"slices"
	"sort"
	"strings"

	"github.com/kvelect/election/cmd/chaos/check"
)

// Timeline geometry: pixels per second of run time, and per lane.
const (
	pxPerSecond = 60.0
	laneHeight  = 28
	laneTop     = 40
	labelWidth  = 70
)

// WriteHTML writes a self-contained page with the run's timeline: a lane per
// worker with its life as a candidate (grey), its leadership (green, with the
// raw belief including paused time as an outline), its pauses (hatched), its
// renewals (ticks), faults as labelled lines, and any overlap in red.
func WriteHTML(path string, r *check.Report) error {
	workers := slices.Sorted(func(yield func(string) bool) {
		for w := range r.Timeline.Workers {
			if !yield(w) {
				return
			}
		}
	})
	sort.SliceStable(workers, func(i, j int) bool { return workerIndex(workers[i]) < workerIndex(workers[j]) })
	lane := map[string]int{}
	for i, w := range workers {
		lane[w] = i
	}
	t0, t1 := r.Timeline.Start, r.Timeline.End
	x := func(t int64) float64 { return labelWidth + float64(t-t0)/1e9*pxPerSecond }
	y := func(w string) int { return laneTop + lane[w]*laneHeight }
	width := x(t1) + 20
	height := laneTop + len(workers)*laneHeight + 30

	var b strings.Builder
	fmt.Fprintf(&b, "<svg xmlns='http://www.w3.org/2000/svg' width='%.0f' height='%d' font-family='sans-serif' font-size='11'>\n", width, height)
	b.WriteString("<defs><pattern id='hatch' width='6' height='6' patternUnits='userSpaceOnUse' patternTransform='rotate(45)'><line x1='0' y1='0' x2='0' y2='6' stroke='#999' stroke-width='3'/></pattern></defs>\n")
	for s := int64(0); t0+s*1e9 <= t1; s += 5 {
		xs := x(t0 + s*1e9)
		fmt.Fprintf(&b, "<line x1='%.1f' y1='%d' x2='%.1f' y2='%d' stroke='#eee'/><text x='%.1f' y='%d' fill='#888'>%ds</text>\n",
			xs, laneTop-5, xs, height-20, xs+2, height-8, s)
	}
	for _, w := range workers {
		events := r.Timeline.Workers[w]
		if len(events) == 0 {
			continue
		}
		yy := y(w)
		life0, life1 := events[0].T, events[len(events)-1].T
		if d, ok := r.Timeline.Deaths[w]; ok {
			life1 = d
		}
		fmt.Fprintf(&b, "<text x='4' y='%d'>%s</text>\n", yy+16, html.EscapeString(w))
		fmt.Fprintf(&b, "<rect x='%.1f' y='%d' width='%.1f' height='4' fill='#ccc'><title>%s alive</title></rect>\n",
			x(life0), yy+10, x(life1)-x(life0), html.EscapeString(w))
		for _, ev := range events {
			if ev.LeaseWrite() && ev.Op == "update" {
				fmt.Fprintf(&b, "<line x1='%.1f' y1='%d' x2='%.1f' y2='%d' stroke='#246'/>\n", x(ev.Sent), yy+2, x(ev.Sent), yy+6)
			}
		}
	}
	for _, t := range r.Timeline.Terms {
		yy := y(t.Worker)
		fmt.Fprintf(&b, "<rect x='%.1f' y='%d' width='%.1f' height='16' fill='none' stroke='#3a3' stroke-dasharray='3,2'/>\n",
			x(t.Start), yy+4, x(t.Observed)-x(t.Start))
		for _, s := range t.Adjusted {
			fmt.Fprintf(&b, "<rect x='%.1f' y='%d' width='%.1f' height='16' fill='#5c5'><title>%s leads, token %d</title></rect>\n",
				x(s.From), yy+4, x(s.To)-x(s.From), html.EscapeString(t.Worker), t.Token)
		}
		for _, p := range t.Paused {
			fmt.Fprintf(&b, "<rect x='%.1f' y='%d' width='%.1f' height='20' fill='url(#hatch)'><title>paused</title></rect>\n",
				x(p.From), yy+2, x(p.To)-x(p.From))
		}
	}
	for _, o := range r.Timeline.Overlaps {
		fmt.Fprintf(&b, "<rect x='%.1f' y='%d' width='%.1f' height='%d' fill='red' opacity='0.5'><title>two leaders</title></rect>\n",
			x(o.From), laneTop, max(x(o.To)-x(o.From), 2), len(workers)*laneHeight)
	}
	for i, m := range r.Timeline.Faults {
		fmt.Fprintf(&b, "<line x1='%.1f' y1='%d' x2='%.1f' y2='%d' stroke='#c60' stroke-dasharray='4,3'/><text x='%.1f' y='%d' fill='#c60'>%s</text>\n",
			x(m.At), laneTop-14+(i%2)*8, x(m.At), height-20, x(m.At)+2, laneTop-16+(i%2)*8, html.EscapeString(m.Label))
	}
	b.WriteString("</svg>\n")

	page := fmt.Sprintf(`<!doctype html>
<html><head><meta charset="utf-8"><title>chaos run</title>
<style>body{font-family:sans-serif;margin:16px} .scroll{overflow-x:auto;border:1px solid #ddd}</style></head>
<body><h1>chaos run: %s</h1>
<p>%d faults, %d elections, split brain %.1f ms (raw %.1f ms), stale tokens accepted %d.
Green: leading (IsLeader true); dashed outline: leadership as the worker recorded it, paused time included;
hatched: paused; grey: alive; ticks: renewals; orange: faults; red: two leaders.</p>
<div class="scroll">%s</div></body></html>
`, html.EscapeString(mode(r)), r.Faults, r.Elections, r.SplitBrainMS, r.SplitBrainRawMS, r.StaleTokensAccepted, b.String())
	return os.WriteFile(path, []byte(page), 0o644)
}

// workerIndex orders w0, w1, … w10 numerically.
func workerIndex(name string) int {
	var n int
	fmt.Sscanf(name, "w%d", &n)
	return n
}
