// Package slogrus is a log/slog handler that writes through logrus, so the
// commands can hand the library a *slog.Logger and keep one log format.
package slogrus

import (
	"context"
	"log/slog"

	"github.com/sirupsen/logrus"
)

// Handler writes slog records to a logrus logger, attributes as fields.
type Handler struct {
	log    *logrus.Logger
	min    slog.Level // records below it are dropped, whatever log's level
	fields logrus.Fields
	prefix string // group names joined by dots, with a trailing dot
}

// New returns a *slog.Logger that writes to log.
func New(log *logrus.Logger) *slog.Logger {
	return NewAtLeast(log, slog.LevelDebug)
}

// NewAtLeast returns a *slog.Logger that writes to log the records at min
// or above.
func NewAtLeast(log *logrus.Logger, min slog.Level) *slog.Logger {
	return slog.New(&Handler{log: log, min: min, fields: logrus.Fields{}})
}

// Enabled implements slog.Handler.
func (h *Handler) Enabled(_ context.Context, level slog.Level) bool {
	return level >= h.min && h.log.IsLevelEnabled(logrusLevel(level))
}

// Handle implements slog.Handler.
func (h *Handler) Handle(_ context.Context, r slog.Record) error {
	fields := make(logrus.Fields, len(h.fields)+r.NumAttrs())
	for k, v := range h.fields {
		fields[k] = v
	}
	r.Attrs(func(a slog.Attr) bool {
		addAttr(fields, h.prefix, a)
		return true
	})
	h.log.WithFields(fields).WithTime(r.Time).Log(logrusLevel(r.Level), r.Message)
	return nil
}

// WithAttrs implements slog.Handler.
func (h *Handler) WithAttrs(attrs []slog.Attr) slog.Handler {
	fields := make(logrus.Fields, len(h.fields)+len(attrs))
	for k, v := range h.fields {
		fields[k] = v
	}
	for _, a := range attrs {
		addAttr(fields, h.prefix, a)
	}
	return &Handler{log: h.log, min: h.min, fields: fields, prefix: h.prefix}
}

// WithGroup implements slog.Handler.
func (h *Handler) WithGroup(name string) slog.Handler {
	if name == "" {
		return h
	}
	return &Handler{log: h.log, min: h.min, fields: h.fields, prefix: h.prefix + name + "."}
}

func addAttr(fields logrus.Fields, prefix string, a slog.Attr) {
	v := a.Value.Resolve()
	switch v.Kind() {
	case slog.KindGroup:
		for _, ga := range v.Group() {
			addAttr(fields, prefix+a.Key+".", ga)
		}
	case slog.KindDuration:
		fields[prefix+a.Key] = v.Duration().String()
	default:
		if a.Key != "" {
			fields[prefix+a.Key] = v.Any()
		}
	}
}

func logrusLevel(l slog.Level) logrus.Level {
	switch {
	case l >= slog.LevelError:
		return logrus.ErrorLevel
	case l >= slog.LevelWarn:
		return logrus.WarnLevel
	case l >= slog.LevelInfo:
		return logrus.InfoLevel
	default:
		return logrus.DebugLevel
	}
}
