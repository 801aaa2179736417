package cli

import (
	"fmt"
	"io"
	"strings"
)

// command is a subcommand of election.
type command struct {
	name    string
	summary string
	main    func(args []string, stdout, stderr io.Writer) int
}

// commands are the subcommands, in the order --help lists them.
var commands = []command{
	{"run", "run a command only while this process leads an election", runMain},
	{"sidecar", "campaign, and tell another process over HTTP who leads", sidecarMain},
	{"agent", "run daemons across a fleet of machines, each on one of them", agentMain},
	{"status", "print who leads each key, or watch one key's leader", statusMain},
	{"resign", "ask a key's leader to stand down for another candidate", resignMain},
	{"transfer", "ask a key's leader to hand it to a named candidate", transferMain},
	{"history", "print who led each key, when, and why it changed", historyMain},
	{"check", "check for monitoring: a key's leader, a fleet's daemons (Nagios, Prometheus, JSON)", checkMain},
	{"dashboard", "serve a live web page of the bucket's leaders and history", dashboardMain},
	{"bucket", "create or check an election bucket", bucketMain},
	{"verify", "measure round trips, clocks and the stream, and the TTL they call for", verifyMain},
	{"permissions", "print the least NATS permissions of a role", permissionsMain},
}

// Exit codes of the commands themselves; run also exits with its command's
// status.
const (
	ExitOK    = 0
	ExitError = 1 // the server, the bucket or the election failed
	ExitUsage = 2 // bad flags or arguments
)

// Main runs the command line args (the arguments after the program's name,
// at least one) and returns the exit code.
func Main(args []string, stdout, stderr io.Writer) int {
	switch args[0] {
	case "-version", "--version", "version":
		fmt.Fprintln(stdout, version())
		return ExitOK
	case "-h", "-help", "--help", "help":
		if len(args) > 1 {
			return Main([]string{args[1], "--help"}, stdout, stderr)
		}
		printUsage(stdout)
		return ExitOK
	}
	for _, c := range commands {
		if c.name == args[0] {
			return c.main(args[1:], stdout, stderr)
		}
	}
	fmt.Fprintf(stderr, "election: unknown command %q; want %s, or no arguments for the demo (election --help)\n",
		args[0], commandNames())
	return ExitUsage
}

func commandNames() string {
	names := make([]string, len(commands))
	for i, c := range commands {
		names[i] = c.name
	}
	last := len(names) - 1
	return strings.Join(names[:last], ", ") + " or " + names[last]
}

func printUsage(w io.Writer) {
	fmt.Fprint(w, `election runs leader elections on NATS JetStream Key-Value.

Usage:
  election                 the demo: workers on an embedded server (see the README)
  election COMMAND --help  help for a command
  election --version       the version of this binary

Commands:
`)
	for _, c := range commands {
		fmt.Fprintf(w, "  %-11s %s\n", c.name, c.summary)
	}
}
