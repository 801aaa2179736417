package cli

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"regexp"
	"strings"
	"time"

	"github.com/kvelect/election"
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

// flagSet is a subcommand's flags, with its help text.
type flagSet struct {
	*flag.FlagSet
	path    string            // "election run"
	about   string            // usage line and description, before the flags
	aliases map[string]string // primary flag name → its short alias
}

func newFlagSet(path, about string) *flagSet {
	fs := &flagSet{FlagSet: flag.NewFlagSet(path, flag.ContinueOnError), path: path, about: about, aliases: map[string]string{}}
	fs.SetOutput(io.Discard) // parse reports errors in one line
	return fs
}

// alias makes -short another name of the flag name.
func (fs *flagSet) alias(short, name string) {
	fs.Var(fs.Lookup(name).Value, short, "")
	fs.aliases[name] = short
}

// parse parses args. ok is false when the command must exit with code:
// after --help (0) or a bad flag (2, with one line on stderr).
func (fs *flagSet) parse(args []string, stdout, stderr io.Writer) (code int, ok bool) {
	err := fs.Parse(args)
	switch {
	case errors.Is(err, flag.ErrHelp):
		fs.printUsage(stdout)
		return ExitOK, false
	case err != nil:
		return fs.usageError(stderr, "%s%s", err.Error(), fs.hint(err)), false
	}
	return 0, true
}

// hint points from a flag the command lacks to the command that has it,
// and says what a duration flag takes.
func (fs *flagSet) hint(err error) string {
	name, ok := strings.CutPrefix(err.Error(), "flag provided but not defined: -")
	if ok && name == "ttl" && fs.Lookup("ttl") == nil {
		return "; the TTL belongs to the bucket: election bucket create --ttl 10s (election bucket check shows it)"
	}
	if m := invalidFlag.FindStringSubmatch(err.Error()); m != nil {
		if f := fs.Lookup(m[1]); f != nil {
			if g, ok := f.Value.(flag.Getter); ok && isDuration(g.Get()) {
				return "; allowed: a number with a unit, such as 10s, 1m30s, 500ms or 24h"
			}
		}
	}
	return ""
}

func isDuration(v any) bool {
	_, ok := v.(time.Duration)
	return ok
}

// invalidFlag matches the flag package's error for a value a flag refused,
// capturing the flag's name.
var invalidFlag = regexp.MustCompile(`^invalid value ".*" for flag -([^:]+): `)

// usageError writes msg on one line and returns the usage exit code.
func (fs *flagSet) usageError(stderr io.Writer, format string, args ...any) int {
	fmt.Fprintf(stderr, "%s: %s (%s --help)\n", fs.path, fmt.Sprintf(format, args...), fs.path)
	return ExitUsage
}

func (fs *flagSet) printUsage(w io.Writer) {
	fmt.Fprintln(w, strings.TrimSpace(fs.about))
	header := "\nFlags:"
	fs.VisitAll(func(f *flag.Flag) {
		if f.Usage == "" {
			return // an alias, listed with its flag
		}
		if header != "" {
			fmt.Fprintln(w, header)
			header = ""
		}
		arg, usage := flag.UnquoteUsage(f)
		names := "    --" + f.Name
		if short, ok := fs.aliases[f.Name]; ok {
			names = "-" + short + ", --" + f.Name
		}
		if arg != "" {
			names += " " + arg
		}
		if f.DefValue != "" && f.DefValue != "false" && f.DefValue != "0" && f.DefValue != "0s" {
			usage += fmt.Sprintf(" (default %s)", f.DefValue)
		}
		if len(names) > 26 {
			fmt.Fprintf(w, "  %s\n  %-26s %s\n", names, "", usage)
			return
		}
		fmt.Fprintf(w, "  %-26s %s\n", names, usage)
	})
}

// bucketFlag is a --bucket flag: the name is checked as it is parsed, so that
// a bad one is a usage error (exit 2) before anything connects.
type bucketFlag struct{ name *string }

func (b bucketFlag) String() string {
	if b.name == nil {
		return ""
	}
	return *b.name
}

func (b bucketFlag) Set(value string) error {
	if election.CheckBucketName(value) != nil {
		return errors.New("allowed: letters, digits, - and _")
	}
	*b.name = value
	return nil
}

// bucketVar defines --bucket, defaulting to defaultBucket.
func (fs *flagSet) bucketVar(p *string, usage string) {
	*p = defaultBucket
	fs.Var(bucketFlag{p}, "bucket", usage)
}

// checkKeyFlag checks an optional --key before anything connects.
func checkKeyFlag(key string) error {
	if key == "" {
		return nil
	}
	return election.CheckKey(key)
}
