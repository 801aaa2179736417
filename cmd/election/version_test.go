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
