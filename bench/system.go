package main

import "time"

// system is one leader election implementation under test, with the server
// it runs against.
type system interface {
	// name is how the tables call the system.
	name() string
	// serverAddr is the host:port the candidates' fault proxies forward to.
	serverAddr() string
	// renewalPeriod is how often a leader renews its hold on the server: a
	// round waits a random fraction of it before injecting its fault.
	renewalPeriod() time.Duration
	// newCandidate connects candidate id of election through addr, its own
	// fault proxy, and reports what happens to it on events. It does not
	// campaign yet.
	newCandidate(addr, election string, id int, events chan<- event) (candidate, error)
	// close stops the server and removes its data.
	close()
}

// candidate is one contender with its own client connection.
type candidate interface {
	// campaign starts campaigning in the background: it reports campaigning
	// at once, then won (and later lost) or failed.
	campaign()
	// resign is the graceful stop: the leader stands down and releases its
	// hold. It returns once that is done.
	resign()
	// close drops the connection without releasing anything and ends the
	// candidate's goroutines.
	close()
}

// eventKind says what happened to a candidate.
type eventKind int

const (
	campaigning eventKind = iota // about to create its election and make its first claim
	won                          // announced as leader
	lost                         // stopped believing it leads
	failed                       // could not campaign; err says why
)

// event is something that happened to candidate id, timestamped on the
// monotonic clock when it happened.
type event struct {
	kind eventKind
	id   int
	at   time.Time
	err  error
}
