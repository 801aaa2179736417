// Package cli is the command line of cmd/election: Main runs a command
// (run, sidecar, agent, status, resign, transfer, history, check,
// dashboard, bucket, verify, permissions, completion) through a cobra
// command tree built from the commands' definitions (commands.go), and
// Demo runs the demo. Each command is in a file of its own,
// NAME_command.go; what several share (the connection flags, opening the
// bucket, JSON output, redaction, refused permissions, logging, the HTTP
// servers, the supervision of a command under the guard) is in files named
// for it.
package cli
