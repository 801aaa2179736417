package election_test

import (
	"testing"

	"github.com/kvelect/election/internal/testenv"
)

func TestMain(m *testing.M) { testenv.VerifyNoLeaks(m) }
