package cli

import (
	"strings"
	"testing"
)

// TestDemoSettingsAreCheckedBeforeAnythingStarts covers the demo's
// environment: every bad value is refused, naming what is allowed, before a
// server starts; NATS_CONTEXT is read as the nats CLI reads it.
func TestDemoSettingsAreCheckedBeforeAnythingStarts(t *testing.T) {
	for env, says := range map[string]string{
		"WORKERS=0":                    "want a whole number from 1 to 1000",
		"WORKERS=100000":               "want a whole number from 1 to 1000",
		"TTL=1s":                       "want 2s to 1h0m0s",
		"TTL=ten":                      "want a duration such as 10s",
		"WORKERS=zero":                 "want a whole number from 1 to 1000",
		"KEY=_kvelect.x":               "reserved",
		"KEY=a b":                      "allowed",
		"NATS_URL=http://u:secret@h:1": `scheme "http"`,
	} {
		t.Run(env, func(t *testing.T) {
			name, value, _ := strings.Cut(env, "=")
			t.Setenv(name, value)
			_, err := configFromEnv()
			if err == nil || !strings.Contains(err.Error(), says) || strings.Contains(err.Error(), "secret") {
				t.Errorf("%s: error %v; want one that says %q and no password", env, err, says)
			}
		})
	}
	t.Run("NATS_CONTEXT", func(t *testing.T) {
		t.Setenv("CONTEXT", "")
		t.Setenv("NATS_CONTEXT", "prod")
		if cfg, err := configFromEnv(); err != nil || cfg.conn.context != "prod" {
			t.Errorf("NATS_CONTEXT=prod: context %q, error %v; want prod", cfg.conn.context, err)
		}
	})
}
