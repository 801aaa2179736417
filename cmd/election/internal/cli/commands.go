package cli

import (
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// The command line is a cobra command tree built from commands: cobra finds
// the command, lists the commands in --help and writes the shell
// completion scripts (election completion bash|zsh); each command parses
// its own flags (flags.go), so that they keep the flag package's syntax
// (-name and --name alike), errors and help, and the same definitions give
// cobra the flags to complete.

// runFunc runs a command with the arguments after its name and returns its
// exit code.
type runFunc func(args []string, stdout, stderr io.Writer) int

// command is a subcommand of election.
type command struct {
	name    string
	summary string
	// define defines the command's flags on a new flag set, and returns
	// them with the function that parses the arguments into them and runs
	// the command.
	define  func() (*flagSet, runFunc)
	actions []command // bucket's create and check
}

// commands are the subcommands, in the order --help lists them.
var commands = []command{
	{name: "run", summary: "run a command only while this process leads an election", define: runCommand},
	{name: "sidecar", summary: "campaign, and tell another process over HTTP who leads", define: sidecarCommand},
	{name: "agent", summary: "run daemons across a fleet of machines, each on one of them", define: agentCommand},
	{name: "status", summary: "print who leads each key, or watch one key's leader", define: statusCommand},
	{name: "resign", summary: "ask a key's leader to stand down for another candidate", define: resignCommand},
	{name: "transfer", summary: "ask a key's leader to hand it to a named candidate", define: transferCommand},
	{name: "history", summary: "print who led each key, when, and why it changed", define: historyCommand},
	{name: "check", summary: "check for monitoring: a key's leader, a fleet's daemons (Nagios, Prometheus, JSON)", define: checkCommand},
	{name: "dashboard", summary: "serve a live web page of the bucket's leaders and history", define: dashboardCommand},
	{name: "bucket", summary: "create or check an election bucket", define: bucketCommand, actions: []command{
		{name: "create", summary: "create an election bucket, or check the one there", define: bucketCreateCommand},
		{name: "check", summary: "check that a bucket is usable for elections", define: bucketCheckCommand},
	}},
	{name: "verify", summary: "measure round trips, clocks and the stream, and the TTL they call for", define: verifyCommand},
	{name: "permissions", summary: "print the least NATS permissions of a role", define: permissionsCommand},
}

// completionSummary is the completion command's line in --help.
const completionSummary = "print a shell completion script: election completion bash|zsh"

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
		// help COMMAND is COMMAND --help; help help, --help help and the
		// like come down to --help --help, which is this usage.
		if len(args) > 1 && args[1] != args[0] {
			return Main([]string{args[1], "--help"}, stdout, stderr)
		}
		printUsage(stdout)
		return ExitOK
	}
	root := &cobra.Command{
		Use:               "election",
		Short:             "election runs leader elections on NATS JetStream Key-Value",
		SilenceErrors:     true,
		SilenceUsage:      true,
		CompletionOptions: cobra.CompletionOptions{DisableDefaultCmd: true},
	}
	root.SetOut(stdout)
	root.SetErr(stderr)
	code := ExitOK
	for _, c := range commands {
		root.AddCommand(c.cobra(&code))
	}
	root.AddCommand(completionCommand(root))
	if !slices.ContainsFunc(root.Commands(), func(c *cobra.Command) bool { return c.Name() == args[0] }) &&
		args[0] != cobra.ShellCompRequestCmd && args[0] != cobra.ShellCompNoDescRequestCmd {
		fmt.Fprintf(stderr, "election: unknown command %q; want %s, or no arguments for the demo (election --help)\n",
			args[0], commandNames())
		return ExitUsage
	}
	root.SetArgs(args)
	if cmd, err := root.ExecuteC(); err != nil {
		fmt.Fprintf(stderr, "%s: %v (%s --help)\n", cmd.CommandPath(), err, cmd.CommandPath())
		return ExitUsage
	}
	return code
}

// cobra is c as a cobra command, whose run sets *code. The command parses
// its own flags; cobra knows them, to complete them.
func (c command) cobra(code *int) *cobra.Command {
	fs, _ := c.define()
	cc := &cobra.Command{
		Use:                c.name,
		Short:              c.summary,
		Long:               strings.TrimSpace(fs.about),
		DisableFlagParsing: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			_, run := c.define()
			*code = run(args, cmd.OutOrStdout(), cmd.ErrOrStderr())
			return nil
		},
		ValidArgsFunction: func(*cobra.Command, []string, string) ([]cobra.Completion, cobra.ShellCompDirective) {
			return nil, cobra.ShellCompDirectiveDefault // a file, as for run's COMMAND
		},
	}
	fs.VisitAll(func(f *flag.Flag) {
		if f.Usage == "" {
			return // an alias, the shorthand of its flag
		}
		pf := pflag.PFlagFromGoFlag(f)
		pf.Shorthand = fs.aliases[f.Name]
		pf.Usage = strings.ReplaceAll(f.Usage, "`", "") // a completion's description
		cc.Flags().AddFlag(pf)
	})
	for _, a := range c.actions {
		cc.AddCommand(a.cobra(code))
	}
	return cc
}

// completionCommand is election completion: it prints root's completion
// script for bash (which names every command and flag) or zsh (which asks
// election for the completions as it goes).
func completionCommand(root *cobra.Command) *cobra.Command {
	return &cobra.Command{
		Use:       "completion bash|zsh",
		Short:     completionSummary,
		Long:      "Prints the completion script of election for bash or zsh. Load it in the shell:\n  source <(election completion bash)\n  source <(election completion zsh)",
		ValidArgs: []cobra.Completion{"bash", "zsh"},
		Args: func(_ *cobra.Command, args []string) error {
			switch {
			case len(args) != 1:
				return fmt.Errorf("want one shell, bash or zsh; got %d arguments", len(args))
			case args[0] != "bash" && args[0] != "zsh":
				return fmt.Errorf("shell %q: want bash or zsh", args[0])
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if args[0] == "bash" {
				return root.GenBashCompletion(cmd.OutOrStdout())
			}
			return root.GenZshCompletion(cmd.OutOrStdout())
		},
	}
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
	fmt.Fprintf(w, "  %-11s %s\n", "completion", completionSummary)
}
