package cli

import (
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/kvelect/election/endpoint"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
)

const permissionsAbout = `Usage:
  election permissions --role ROLE [--bucket B] [--history=false] [--format server|nsc] [--js-domain D] [--inbox-prefix P]
                       [--serve SUBJECT]

Prints the least NATS permissions a user needs for ROLE on the bucket B:
  candidate  campaign for keys: election run and sidecar, and the library's elections
  observer   watch leaders: election status, and the library's Observe
  admin      election bucket create|check, resign and transfer
as a permissions block for a user in the server's configuration (server),
or as the flags of nsc edit user (nsc). A user with several roles needs
the union of their blocks. The blocks include what the role needs of the
bucket's leadership history, which is on by default: candidates record in
it (run, sidecar and agent), observers read it (election history), admins
create it (bucket create). --history=false leaves those lines out: such a
candidate warns once and records nothing, and bucket create needs
--history 0.

Give the same --js-domain and --inbox-prefix as the commands will use: the
JetStream API subjects carry the domain, and replies arrive on the inbox
prefix (a prefix of the user's own keeps other users' replies private).

With --serve SUBJECT (role candidate), the block also grants what a
leader-only endpoint needs (election run and sidecar --serve SUBJECT):
subscribing to SUBJECT in the queue group kvelect, subscribing to $SRV.>
for micro's discovery (nats micro ls, info, stats), and publishing the
replies (allow_responses: to the reply subject of a request received, once).

Exit status: 0; 2 for bad flags.
`

// Roles are the sets of commands a NATS user may be granted.
const (
	roleCandidate = "candidate"
	roleObserver  = "observer"
	roleAdmin     = "admin"
)

// permissionSet is the subjects a role may publish to (but not pubDeny) and
// subscribe to.
type permissionSet struct {
	pubAllow, pubDeny, subAllow []string
	// allowResponses lets the user publish one reply to the reply subject
	// of each request it receives (allow_responses), as an endpoint does.
	allowResponses bool
}

// servePermissions adds to p what a leader-only endpoint serving subject
// needs: its queue subscription, micro's discovery subjects, and replies.
func (p permissionSet) servePermissions(subject string) permissionSet {
	p.subAllow = append(slices.Clone(p.subAllow), subject+" "+endpoint.DefaultQueueGroup, micro.APIPrefix+".>")
	p.allowResponses = true
	return p
}

// rolePermissions returns the least permissions role needs on bucket, with
// the JetStream API in domain (empty: the local API) and replies under
// inbox (empty: _INBOX), and with history those its leadership history
// needs too.
func rolePermissions(role, bucket, domain, inbox string, history bool) (permissionSet, error) {
	p, err := basePermissions(role, bucket, domain, inbox)
	if err == nil && history {
		p.pubAllow = append(p.pubAllow, historyPermissions(role, bucket, domain)...)
	}
	return p, err
}

// historyPermissions are what role needs, beyond its base permissions, to
// use the leadership history of bucket: candidates record in it (run,
// sidecar and agent), observers read it (election history), admins create
// it (bucket create).
func historyPermissions(role, bucket, domain string) []string {
	api := "$JS.API"
	if domain != "" {
		api = "$JS." + domain + ".API"
	}
	stream := "KVELECT_HISTORY_" + bucket
	info := api + ".STREAM.INFO." + stream
	lastRun := api + ".STREAM.MSG.GET." + stream // run --once reads the key's last run
	switch role {
	case roleCandidate:
		return []string{info, lastRun, "kvelect.history." + bucket + ".>"}
	case roleObserver:
		return []string{info,
			api + ".CONSUMER.CREATE." + stream + ".>", api + ".CONSUMER.INFO." + stream + ".>",
			api + ".CONSUMER.MSG.NEXT." + stream + ".>", api + ".CONSUMER.DELETE." + stream + ".>"}
	case roleAdmin:
		return []string{api + ".STREAM.CREATE." + stream, info}
	}
	return nil
}

// basePermissions are what role needs on bucket without its history.
func basePermissions(role, bucket, domain, inbox string) (permissionSet, error) {
	api := "$JS.API"
	if domain != "" {
		api = "$JS." + domain + ".API"
	}
	if inbox == "" {
		inbox = nats.InboxPrefix[:len(nats.InboxPrefix)-1]
	}
	stream := "KV_" + bucket
	keys := "$KV." + bucket + "."
	requests := keys + "_kvelect.request.>"
	info := api + ".STREAM.INFO." + stream
	watch := []string{
		api + ".CONSUMER.CREATE." + stream + ".>", // the watcher's ordered consumer
		api + ".CONSUMER.DELETE." + stream + ".>", // removed when the watcher stops
		"$JS.FC." + stream + ".>",                 // flow control replies, without which a watch stalls
	}
	replies := []string{inbox + ".>"}
	switch role {
	case roleObserver:
		return permissionSet{pubAllow: append([]string{info}, watch...), subAllow: replies}, nil
	case roleCandidate:
		return permissionSet{
			pubAllow: append([]string{info, keys + ">"}, watch...),
			pubDeny:  []string{requests}, // resign and transfer are the admin's
			subAllow: replies,
		}, nil
	case roleAdmin:
		return permissionSet{
			pubAllow: append([]string{api + ".INFO", api + ".STREAM.CREATE." + stream, info, requests}, watch...),
			subAllow: replies,
		}, nil
	}
	return permissionSet{}, fmt.Errorf("--role %q: want candidate, observer or admin", role)
}

// serverBlock is p as a user's permissions block in a server configuration.
func (p permissionSet) serverBlock() string {
	list := func(subjects []string) string {
		quoted := make([]string, len(subjects))
		for i, s := range subjects {
			quoted[i] = fmt.Sprintf("%q", s)
		}
		return "[" + strings.Join(quoted, ", ") + "]"
	}
	var b strings.Builder
	b.WriteString("permissions {\n  publish {\n    allow: " + list(p.pubAllow) + "\n")
	if len(p.pubDeny) > 0 {
		b.WriteString("    deny: " + list(p.pubDeny) + "\n")
	}
	b.WriteString("  }\n  subscribe {\n    allow: " + list(p.subAllow) + "\n  }\n")
	if p.allowResponses {
		b.WriteString("  allow_responses: true\n")
	}
	b.WriteString("}\n")
	return b.String()
}

// nscFlags is p as the flags of nsc edit user.
func (p permissionSet) nscFlags() string {
	var b strings.Builder
	b.WriteString("nsc edit user --name USER")
	for _, f := range []struct {
		flag     string
		subjects []string
	}{{"--allow-pub", p.pubAllow}, {"--deny-pub", p.pubDeny}, {"--allow-sub", p.subAllow}} {
		for _, s := range f.subjects {
			fmt.Fprintf(&b, " \\\n  %s '%s'", f.flag, s)
		}
	}
	if p.allowResponses {
		b.WriteString(" \\\n  --allow-pub-response")
	}
	b.WriteString("\n")
	return b.String()
}

// permissionsCommand defines the flags of "election permissions" and
// returns them with the function that runs it.
func permissionsCommand() (*flagSet, runFunc) {
	fs := newFlagSet("election permissions", permissionsAbout)
	var role, bucket, format, domain, inbox, serve string
	var history bool
	fs.StringVar(&role, "role", "", "the `ROLE`: candidate, observer or admin (required)")
	fs.bucketVar(&bucket, "the election bucket's `NAME`")
	fs.StringVar(&format, "format", "server", "`FORMAT`: server (a configuration block) or nsc (nsc edit user flags)")
	fs.StringVar(&domain, "js-domain", "", "the JetStream `DOMAIN` the commands will use")
	fs.StringVar(&inbox, "inbox-prefix", "", "the inbox `PREFIX` the commands will use (default _INBOX)")
	fs.StringVar(&serve, "serve", "", "with --role candidate, include what a leader-only endpoint serving `SUBJECT` needs (run and sidecar --serve)")
	fs.BoolVar(&history, "history", true, "include the leadership history's subjects (recorded by run, sidecar and agent, read by election history, made by bucket create); --history=false leaves them out")
	return fs, func(args []string, stdout, stderr io.Writer) int {
		if code, ok := fs.parse(args, stdout, stderr); !ok {
			return code
		}
		if fs.NArg() > 0 {
			return fs.usageError(stderr, "unexpected argument %q", fs.Arg(0))
		}
		if role == "" {
			return fs.usageError(stderr, "--role is required: candidate, observer or admin")
		}
		check := connFlags{jsDomain: domain, inboxPrefix: inbox}
		if err := check.checkSubjects(); err != nil {
			return fs.usageError(stderr, "%v", err)
		}
		p, err := rolePermissions(role, bucket, domain, inbox, history)
		if err != nil {
			return fs.usageError(stderr, "%v", err)
		}
		if serve != "" {
			if role != roleCandidate {
				return fs.usageError(stderr, "--serve is for --role candidate: the candidates serve the endpoint")
			}
			if err := endpoint.CheckSubject(serve); err != nil {
				return fs.usageError(stderr, "--serve: %v", err)
			}
			p = p.servePermissions(serve)
		}
		switch format {
		case "server":
			fmt.Fprintf(stdout, "# election %s on bucket %s: the user's block in the server's authorization users\n%s", role, bucket, p.serverBlock())
		case "nsc":
			fmt.Fprint(stdout, p.nscFlags())
		default:
			return fs.usageError(stderr, "--format %q: want server or nsc", format)
		}
		return ExitOK
	}
}
