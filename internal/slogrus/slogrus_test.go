package slogrus

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"

	"github.com/sirupsen/logrus"
)

func TestNewAtLeastDropsRecordsBelowItsLevel(t *testing.T) {
	var out bytes.Buffer
	log := logrus.New()
	log.SetOutput(&out)
	log.SetLevel(logrus.DebugLevel)
	l := NewAtLeast(log, slog.LevelWarn).With("worker", "w1").WithGroup("g")
	l.Info("quiet")
	l.Warn("loud", "k", "v")
	got := out.String()
	if strings.Contains(got, "quiet") || !strings.Contains(got, "loud") || !strings.Contains(got, "worker=w1") || !strings.Contains(got, "g.k=v") {
		t.Errorf("logged %q; want only the warning, with worker=w1 and g.k=v", got)
	}
}
