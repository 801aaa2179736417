package main

import (
	"fmt"
	"runtime/debug"
)

// buildVersion is a release's version, set when it is built with
// -ldflags "-X main.buildVersion=v1.2.3"; empty otherwise.
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
	v = info.Main.Version
	if buildVersion != "" {
		v = buildVersion
	}
	if v == "" || v == "(devel)" {
		v = "devel"
		for _, setting := range info.Settings {
			if setting.Key == "vcs.revision" {
				v += " " + setting.Value
			}
		}
	}
	return v, info.GoVersion, true
}
