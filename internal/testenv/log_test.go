package testenv

import (
	"bytes"
	"io"
	"strings"
	"testing"
)

// outputRecorder is a testing.TB whose output and cleanups the test holds.
type outputRecorder struct {
	testing.TB
	out      bytes.Buffer
	cleanups []func()
}

func (r *outputRecorder) Output() io.Writer { return &r.out }
func (r *outputRecorder) Cleanup(f func())  { r.cleanups = append(r.cleanups, f) }

func TestLoggerWritesToTheTestUntilItEnds(t *testing.T) {
	r := &outputRecorder{TB: t}
	log := Logger(r)
	log.Debug("during the test", "candidate", "c-0")
	for _, f := range r.cleanups {
		f()
	}
	log.Info("after the test ended")
	if got := r.out.String(); !strings.Contains(got, `msg="during the test" candidate=c-0`) || strings.Contains(got, "after") {
		t.Errorf("test output %q: want the line logged during the test and not the one after", got)
	}
}
