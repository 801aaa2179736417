package guard

import (
	"os"
	"testing"

	"github.com/kvelect/election/internal/testenv"
)

// TestMain runs the tests, or the guard of a COMMAND when a test starts
// this test binary again as its guard.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == Command {
		os.Exit(Main(os.Args[2:], os.Stderr))
	}
	testenv.VerifyNoLeaks(m)
}
