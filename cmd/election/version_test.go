package main

import (
	"bytes"
	"runtime"
	"strings"
	"testing"
)

func TestVersionNamesTheBuildAndGo(t *testing.T) {
	for _, arg := range []string{"--version", "version"} {
		var stdout, stderr bytes.Buffer
		code := dispatch([]string{arg}, &stdout, &stderr)
		out := stdout.String()
		if code != exitOK || !strings.HasPrefix(out, "election ") || !strings.Contains(out, runtime.Version()) || stderr.Len() != 0 {
			t.Errorf("election %s: exit %d, stdout %q, stderr %q; want 0 and the version with %s", arg, code, out, stderr.String(), runtime.Version())
		}
	}
}

// TestRunExitsAsTheShellWhenTheCommandCannotRun: 127 for a command that is
// not there, 126 for one that is but cannot be executed.
func TestRunExitsAsTheShellWhenTheCommandCannotRun(t *testing.T) {
	for command, want := range map[string]int{"/etc/passwd": exitCannotRun, "/nonexistent": exitNotFound, "no-such-command": exitNotFound} {
		var stdout, stderr bytes.Buffer
		if code := dispatch([]string{"run", "--key", "k", "--", command}, &stdout, &stderr); code != want {
			t.Errorf("election run -- %s exited %d, want %d; stderr %q", command, code, want, stderr.String())
		}
	}
}
