// Package sidecar serves one election key's leadership over HTTP, for a
// program that cannot link the election library, or a Go service that
// wants the answers of election sidecar on its own mux: who leads (/ and
// /leader), whether this instance leads (/self: 200 or 503), each change as
// server-sent events (/events), and its health (/healthz). It is what the
// election sidecar command serves.
//
// A Server makes its own election (New), so that it sees each leadership
// begin and end; the caller starts it, runs Follow beside it, and mounts
// Handler:
//
//	s, err := sidecar.New(b, "pod-a", "scheduler", sidecar.Config{})
//	done, err := s.Follow(ctx)
//	mux.Handle("/leadership/", http.StripPrefix("/leadership", s.Handler()))
//	err = s.Election().Start(ctx)
//	s.Close() // ends the event streams; then shut the HTTP server down
//	<-done
//
// While it leads, each answer carries a lease (Leadership.LeaseMS): how
// long the application may act as leader without hearing from the server
// again. A LeaderFile, if given, exists, holding the fencing token, only
// while this instance leads. docs/sidecar.md describes the protocol.
package sidecar
