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
