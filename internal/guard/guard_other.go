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

// isChildOf reports true: without /proc, whether pid is still parent's
// child is not known; the caller signals its group as if it were.
func isChildOf(pid, parent int) bool { return true }

// descendants returns no process: without /proc they cannot be listed.
func descendants(root int) []int { return nil }

// isStopped reports false: without /proc, whether a process is stopped is
// not known.
func isStopped(pid int) bool { return false }

// stoppedWhole reports true: without /proc there is no tree to list, so
// waiting for a process to stop gains nothing.
func stoppedWhole(pid int) bool { return true }

// groupLeaderChild returns 0: without /proc, a process's children are not
// known.
func groupLeaderChild(parent int) int { return 0 }
