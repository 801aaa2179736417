//go:build unix && !linux

package guard

import "os"

// becomeReaper does nothing where a process cannot adopt its orphaned
// descendants: the guard kills COMMAND's process group only.
func becomeReaper() {}

// children returns no process: without a subreaper, none is reparented to
// the guard.
func children() []int { return nil }

// selfExecutable is the path of this binary.
func selfExecutable() string {
	path, err := os.Executable()
	if err != nil {
		return os.Args[0]
	}
	return path
}
