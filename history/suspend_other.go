//go:build !linux

package history

import "time"

// machineSuspended returns 0: outside Linux the history cannot tell how
// long the machine was suspended, and a suspended leader's stand-down is
// dated when it resumed (see the package documentation).
func machineSuspended() time.Duration { return 0 }
