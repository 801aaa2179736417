//go:build !unix

package cli

import "os/exec"

// ownGroup leaves cmd as it is: without process groups, its context's end
// kills the command alone.
func ownGroup(*exec.Cmd) {}
