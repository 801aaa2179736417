package cli

import (
	"bytes"
	"encoding/json"
	"regexp"
	"testing"

	"github.com/sirupsen/logrus"
)

// TestBothLogFormatsStampMilliseconds logs one record in each format: each
// carries the date, the time to the millisecond and the zone.
func TestBothLogFormatsStampMilliseconds(t *testing.T) {
	stamp := regexp.MustCompile(`\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}(Z|[+-]\d\d:\d\d)`)
	for _, format := range []string{"text", "json"} {
		var out bytes.Buffer
		log := logrus.New()
		log.SetOutput(&out)
		if err := setupLog(log, format, "info", "--log-format ", "--log-level "); err != nil {
			t.Fatal(err)
		}
		log.Info("hello")
		got := out.String()
		if format == "json" {
			var rec struct{ Time string }
			if err := json.Unmarshal(out.Bytes(), &rec); err != nil {
				t.Fatalf("json: %q: %v", got, err)
			}
			got = rec.Time
		}
		if !stamp.MatchString(got) {
			t.Errorf("%s: %q has no stamp with milliseconds and a zone", format, got)
		}
	}
}
