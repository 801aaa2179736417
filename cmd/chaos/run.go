//go:build unix

package main

import (
	"context"
	"fmt"
	"os"

	"github.com/kvelect/election/cmd/chaos/check"
	"github.com/kvelect/election/cmd/chaos/harness"
	"github.com/kvelect/election/cmd/chaos/report"
	"github.com/kvelect/election/cmd/chaos/scenario"
)

// runChaos runs the harness, checks the histories and prints the report. It
// returns the process exit code.
func runChaos(opts options) int {
	dir, err := os.MkdirTemp("", "chaos-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "chaos:", err)
		return 2
	}
	h, err := harness.New(opts.Config, dir)
	if err == nil {
		err = h.Run(context.Background(), scenario.Chosen(opts.Config))
	}
	if h != nil {
		h.Shutdown()
	}
	if err != nil { // what was recorded until then is checked all the same
		fmt.Fprintf(os.Stderr, "chaos: %v (histories kept in %s)\n", err, dir)
		if h == nil {
			return 2
		}
	}
	harnessErr := err
	rep, err := check.Dir(dir, opts.checkParams())
	if err != nil {
		fmt.Fprintf(os.Stderr, "chaos: checking: %v (histories kept in %s)\n", err, dir)
		return 2
	}
	report.Print(os.Stdout, rep, opts.json)
	if opts.html != "" {
		if err := report.WriteHTML(opts.html, rep); err != nil {
			fmt.Fprintln(os.Stderr, "chaos: html:", err)
		}
	}
	switch {
	case harnessErr != nil:
	case !rep.OK() || opts.keep:
		fmt.Fprintf(os.Stderr, "chaos: histories kept in %s\n", dir)
	default:
		os.RemoveAll(dir)
	}
	switch {
	case !rep.OK():
		return 1
	case harnessErr != nil:
		return 2
	}
	return 0
}
