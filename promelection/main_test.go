package promelection_test

import (
	"fmt"
	"os"
	"testing"

	"github.com/kvelect/election/internal/embedded"
	"github.com/kvelect/election/internal/testenv"
)

// natsURL is the address of the embedded server the examples use.
var natsURL string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "promelection-example-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	s, err := embedded.Server(dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	natsURL = s.ClientURL()
	testenv.VerifyNoLeaks(m, func() {
		embedded.Shutdown(s)
		os.RemoveAll(dir)
	})
}
