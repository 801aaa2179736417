// Command election runs leader elections on NATS JetStream Key-Value.
//
// Without arguments it is the demo of the election library: WORKERS workers
// in one process campaign for KEY in the bucket DEMO_ELECTION; the leader
// "does work" once a second. Delete the key from another client to force a
// failover; SIGINT or SIGTERM makes the leader release the key and exits 0.
// With neither CONTEXT nor NATS_URL set, it runs an embedded JetStream
// nats-server on a free loopback port and logs its URL.
//
// Demo environment:
//
//	WORKERS     number of workers (default 10)
//	KEY         the key to campaign for (default demo)
//	NOSPLAY     1 disables the random start delay
//	CONTEXT     a nats CLI context to connect with
//	NATS_URL    a server URL to connect to, when CONTEXT is not set
//	TTL         bucket TTL when the demo creates the bucket (default 10s)
//	LOG_FORMAT  json for one JSON object per line
//	LOG_LEVEL   debug to also see renewals and lost campaigns
//
// With a command, it is a daemon for programs in any language:
//
//	election run --key K [--bucket B] [--name N] [--grace 10s] [--metrics ADDR] -- COMMAND [ARGS...]
//	election sidecar --key K [--listen 127.0.0.1:4040] [--leader-file FILE] [--bucket B] [--name N]
//	election agent [--bucket B] [--name N] [--capacity W] [--priority N [--prefer-higher]] --daemon NAME=COMMAND ... [--config FILE]
//	election status [--bucket B] [--key K] [--watch] [--json] [--mirror M]
//	election resign --key K [--bucket B] [--timeout 30s]
//	election transfer --key K --to NAME [--bucket B] [--timeout 30s]
//	election history [--bucket B] [--key K] [--since DURATION] [--json]
//	election check --key K [--fleet] [--bucket B] [--format nagios|json|prometheus|text]
//	election dashboard --listen ADDR [--bucket B] [--mirror M] [--metrics ADDR]
//	election bucket create|check --bucket B [--ttl 10s] [--replicas 1] [--storage file] [--history 7d|0] [--cluster C] [--tags T,...]
//	election verify [--bucket B] [--samples 20] [--duration 5s] [--write] [--step-down] [--json]
//	election permissions --role candidate|observer|admin [--bucket B] [--format server|nsc]
//	election completion bash|zsh
//
// run starts COMMAND only while this process leads the election for K, and
// stops it when leadership ends (--metrics serves /metrics and /healthz);
// sidecar campaigns without a command and serves who leads over HTTP, for
// a program beside it (/self answers 200 while this process leads);
// agent joins a fleet and runs its share of the daemons, each on one node;
// status prints who leads, or watches one key; resign and transfer ask a
// leader to hand over; history prints who led each key, when, and why it
// changed; check reports a key's leader or a fleet's daemons for
// monitoring; dashboard serves a live web page of the bucket's leaders and
// history; bucket creates or checks an election bucket; verify measures the
// round trips, server clocks and stream an election rests on, and the TTL
// they call for; permissions prints the least NATS permissions of a role;
// completion prints a script that completes commands and flags in bash or
// zsh.
// Every command takes --server (or NATS_URL) and --context (or
// NATS_CONTEXT) as the nats CLI does; election COMMAND --help says the rest.
//
// The commands live in the package cmd/election/internal/cli; this file
// only hands the process to the guard, the demo or the command line.
package main

import (
	"os"

	"github.com/kvelect/election/cmd/election/internal/cli"
	"github.com/kvelect/election/internal/guard"
)

// main is the guard when election runs itself as the guard of a COMMAND
// (see internal/guard), the demo without arguments, and a command
// otherwise.
func main() {
	if len(os.Args) > 1 && os.Args[1] == guard.Command {
		os.Exit(guard.Main(os.Args[2:], os.Stderr))
	}
	if len(os.Args) == 1 {
		os.Exit(cli.Demo())
	}
	os.Exit(cli.Main(os.Args[1:], os.Stdout, os.Stderr))
}
