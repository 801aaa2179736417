package cli

import (
	"fmt"
	"log/slog"

	"github.com/kvelect/election/internal/slogrus"
	"github.com/sirupsen/logrus"
)

// logTime is how both formats stamp a record: with the date and the zone,
// which a log read later or beside another host's needs, and milliseconds,
// which ordering a leader's stand-down against its successor's start needs.
const logTime = "2006-01-02T15:04:05.000Z07:00"

// setupLog sets log's format (text, or "" for text; or json) and level. An
// error names the setting that is wrong, by formatSetting or levelSetting
// ("--log-format " or "LOG_FORMAT=", say), and what it allows.
func setupLog(log *logrus.Logger, format, level, formatSetting, levelSetting string) error {
	switch format {
	case "", "text":
		log.SetFormatter(&logrus.TextFormatter{FullTimestamp: true, TimestampFormat: logTime})
	case "json":
		log.SetFormatter(&logrus.JSONFormatter{TimestampFormat: logTime})
	default:
		return fmt.Errorf("%s%q: want text or json", formatSetting, format)
	}
	l, err := logrus.ParseLevel(level)
	if err != nil {
		return fmt.Errorf("%s%q: want trace, debug, info, warn, error, fatal or panic", levelSetting, level)
	}
	log.SetLevel(l)
	return nil
}

// slogOf is e as a *slog.Logger, its fields as attributes, for the
// packages that log through slog.
func slogOf(e *logrus.Entry) *slog.Logger {
	args := make([]any, 0, 2*len(e.Data))
	for k, v := range e.Data {
		args = append(args, k, v)
	}
	return slogrus.New(e.Logger).With(args...)
}
