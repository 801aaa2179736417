package topology

import "github.com/nats-io/nats-server/v2/server"

// Configure sets on o the options s describes, for the tests of the
// external package topology_test (which imports testenv, which imports
// this package).
func Configure(s *Server, o *server.Options) { s.configure(o) }
