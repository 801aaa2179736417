package fence_test

import (
	"testing"

	"github.com/kvelect/election/internal/testenv"
)

// natsURL is the address of the embedded server the examples use.
var natsURL string

func TestMain(m *testing.M) { testenv.VerifyNoLeaksWithServer(m, &natsURL) }
