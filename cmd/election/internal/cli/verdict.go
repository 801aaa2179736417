package cli

import (
	"fmt"
	"io"
)

// The verdict of election check and election verify: their findings, and
// the status of a Nagios plugin they come to, which is their exit status.

// Nagios statuses, which are also check's exit codes.
const (
	checkOK       = 0
	checkWarning  = 1
	checkCritical = 2
	checkUnknown  = 3
)

var checkStatusNames = [...]string{"OK", "WARNING", "CRITICAL", "UNKNOWN"}

// verdict is what check and verify found, and the status it comes to: the
// worst finding, as a Nagios plugin's exit status.
type verdict struct {
	Status    string   `json:"status"`
	Code      int      `json:"status_code"`
	Warnings  []string `json:"warning,omitempty"`
	Criticals []string `json:"critical,omitempty"`
	Unknowns  []string `json:"unknown,omitempty"`
}

func (v *verdict) warn(format string, args ...any) {
	v.Warnings = append(v.Warnings, fmt.Sprintf(format, args...))
}
func (v *verdict) critical(format string, args ...any) {
	v.Criticals = append(v.Criticals, fmt.Sprintf(format, args...))
}

// unknown records a check that could not run, with what its error means
// when that is known (see cause), without the library's package name: the
// output names the check already.
func (v *verdict) unknown(err error) { v.Unknowns = append(v.Unknowns, message(err)+hint(err)) }

// finish sets the status: the worst finding.
func (v *verdict) finish() {
	switch {
	case len(v.Unknowns) > 0:
		v.Code = checkUnknown
	case len(v.Criticals) > 0:
		v.Code = checkCritical
	case len(v.Warnings) > 0:
		v.Code = checkWarning
	default:
		v.Code = checkOK
	}
	v.Status = checkStatusNames[v.Code]
}

// parseAsCheck parses args as parse does, for a command whose exit status
// is check's (a Nagios plugin's): a usage error is UNKNOWN, not ExitUsage.
// usage reports one more, found after parsing, the same way.
func (fs *flagSet) parseAsCheck(args []string, stdout, stderr io.Writer) (usage func(format string, args ...any) int, code int, ok bool) {
	usage = func(format string, args ...any) int {
		fs.usageError(stderr, format, args...)
		return checkUnknown
	}
	code, ok = fs.parse(args, stdout, stderr)
	if code == ExitUsage {
		code = checkUnknown
	}
	return usage, code, ok
}
