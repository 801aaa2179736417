// Package cli is the command line of cmd/election: Main parses the
// arguments and runs a command (run, sidecar, agent, status, resign,
// transfer, history, check, dashboard, bucket, verify, permissions), and
// Demo runs the demo. Each command is in a file of its own; what several
// share (the connection flags, opening the bucket, JSON lines, redaction,
// refused permissions, logging, the HTTP servers, the supervision of a
// COMMAND under the guard) is in files named for it.
package cli
