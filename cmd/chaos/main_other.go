//go:build !unix

package main

import (
	"fmt"
	"os"
)

// The harness sends SIGSTOP, SIGCONT and SIGKILL to the processes it runs
// and reads the shared monotonic clock: it runs on Linux and other Unix
// systems only.
func main() {
	fmt.Fprintln(os.Stderr, "chaos: the harness runs on Linux and other Unix systems only (it stops, resumes and kills processes by signal)")
	os.Exit(2)
}
