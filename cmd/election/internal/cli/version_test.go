package cli

import (
	"bytes"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"
)

func TestVersionNamesTheBuildAndGo(t *testing.T) {
	t.Parallel()
	for _, arg := range []string{"--version", "version"} {
		var stdout, stderr bytes.Buffer
		code := Main([]string{arg}, &stdout, &stderr)
		out := stdout.String()
		if code != ExitOK || !strings.HasPrefix(out, "election ") || !strings.Contains(out, runtime.Version()) || stderr.Len() != 0 {
			t.Errorf("election %s: exit %d, stdout %q, stderr %q; want 0 and the version with %s", arg, code, out, stderr.String(), runtime.Version())
		}
	}
}

// TestVersionDescribesABuildFromACommit checks what status's VERSION column
// and --version show for each kind of build: a release as it is, a build
// from any other commit as "devel", the commit and its date, never a raw
// pseudo-version.
func TestVersionDescribesABuildFromACommit(t *testing.T) {
	t.Parallel()
	vcs := []debug.BuildSetting{{Key: "vcs.revision", Value: "d1f878e055f9aa0011223344556677889900aabb"}, {Key: "vcs.modified", Value: "true"}}
	tests := []struct {
		version  string
		settings []debug.BuildSetting
		want     string
	}{
		{"v1.2.3", nil, "v1.2.3"},
		{"v1.2.3-rc.1", nil, "v1.2.3-rc.1"},
		{"v0.0.0-20261125141315-d1f878e055f9", nil, "devel d1f878e055f9 (2026-11-25)"},
		{"v0.0.0-20261125141315-d1f878e055f9+dirty", nil, "devel d1f878e055f9 (2026-11-25) modified"},
		{"v1.2.4-0.20261125141315-d1f878e055f9", nil, "devel d1f878e055f9 (2026-11-25)"},
		{"v1.3.0-pre.0.20261125141315-d1f878e055f9", nil, "devel d1f878e055f9 (2026-11-25)"},
		{"(devel)", vcs, "devel d1f878e055f9 modified"},
		{"", nil, "devel"},
	}
	for _, tt := range tests {
		if got := describeVersion(tt.version, tt.settings); got != tt.want {
			t.Errorf("describeVersion(%q) = %q, want %q", tt.version, got, tt.want)
		}
	}
}
