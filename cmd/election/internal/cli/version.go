package cli

import (
	"fmt"
	"regexp"
	"runtime/debug"
	"time"
)

// buildVersion is a release's version, set when it is built with
// -ldflags "-X github.com/kvelect/election/cmd/election/internal/cli.buildVersion=v1.2.3"; empty otherwise.
var buildVersion string

// version says which build this is: the release's version, the module
// version it was installed at (go install …@v1.2.3), or "devel" with the
// commit it was built from; and the Go version.
func version() string {
	v, goVersion, ok := versionParts()
	if !ok {
		return "election (unknown version)"
	}
	return fmt.Sprintf("election %s, %s", v, goVersion)
}

// versionParts returns the build's version (as version describes it) and
// the Go version it was built with; ok is false when the binary carries no
// build information.
func versionParts() (v, goVersion string, ok bool) {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown", "unknown", false
	}
	if buildVersion != "" {
		return buildVersion, info.GoVersion, true
	}
	return describeVersion(info.Main.Version, info.Settings), info.GoVersion, true
}

// pseudoVersion matches the version the go command gives a build from a
// commit that is not a release: vX.Y.Z-[….]yyyymmddhhmmss-commit[+dirty].
var pseudoVersion = regexp.MustCompile(`^v\d+\.\d+\.\d+-(?:[^+]*\.)?(\d{14})-([0-9a-f]{12})(\+dirty)?$`)

// describeVersion turns a module version into what a reader can use: a
// release's version as it is, and for a build from another commit "devel",
// the commit, and its date (a pseudo-version such as
// v0.0.0-20261125141315-d1f878e055f9 says both, but hardly readably), with
// "modified" if the working tree had changes.
func describeVersion(v string, settings []debug.BuildSetting) string {
	if m := pseudoVersion.FindStringSubmatch(v); m != nil {
		at, err := time.Parse("20060102150405", m[1])
		if err != nil {
			return v
		}
		out := fmt.Sprintf("devel %s (%s)", m[2], at.Format("2006-01-02"))
		if m[3] != "" {
			out += " modified"
		}
		return out
	}
	if v != "" && v != "(devel)" {
		return v
	}
	out, modified := "devel", false
	for _, setting := range settings {
		switch setting.Key {
		case "vcs.revision":
			out += " " + setting.Value[:min(len(setting.Value), 12)]
		case "vcs.modified":
			modified = setting.Value == "true"
		}
	}
	if modified {
		out += " modified"
	}
	return out
}
