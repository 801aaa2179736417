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
//
// # Clocks and suspend
//
// The lease is the election's work deadline (election.WorkDeadline, less
// the work margin) less time.Now: it assumes the election reads the
// machine's clock, as it does unless its Bucket was opened with a clock of
// its own (election.WithClock, for tests), whose deadlines the lease would
// misread. Go's monotonic clock stands still while the machine is
// suspended; on Linux the election sees the sleep when the machine
// resumes and ends the leadership with election.ErrSuspended: from then
// on (until it leads again) every answer's lease is 0, /self answers 503,
// and /events sends, within about 100 ms, that this instance no longer
// leads. An application that counts its lease on a clock that counts a
// suspend (Linux's CLOCK_BOOTTIME, as docs/sidecar.md's samples do) has
// seen it run out during the sleep. On other systems a suspend goes
// unseen (see the election package's documentation).
package sidecar
