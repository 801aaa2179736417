package cli

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestTheCrontabLineMailsOnlyOnFailure runs the crontab line that
// docs/operations.md gives for "mail only on failure" under /bin/sh (dash
// here, as cron's shell), with an election on PATH that prints a line and
// exits as a run --once would: quiet when this host ran the job and it
// succeeded (0) or another host ran it (75); the status and the output
// otherwise, which cron mails.
func TestTheCrontabLineMailsOnlyOnFailure(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile("../../../../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	var line string
	for l := range strings.Lines(string(doc)) {
		if strings.HasPrefix(l, "0 3 * * *  out=$(") {
			line = strings.TrimSpace(l)
		}
	}
	if line == "" {
		t.Fatal("docs/operations.md has no crontab line that starts with 0 3 * * *  out=$(")
	}
	command := strings.Join(strings.Fields(line)[5:], " ") // cron's five time fields dropped
	bin := t.TempDir()
	fake := "#!/bin/sh\necho \"election run: the job's output\"\nexit $FAKE_STATUS\n"
	if err := os.WriteFile(filepath.Join(bin, "election"), []byte(fake), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		status, want string
	}{{"0", ""}, {"75", ""}, {"3", "nightly-backup: exit 3\nelection run: the job's output\n"}} {
		cmd := exec.Command("/bin/sh", "-c", command)
		cmd.Env = append(os.Environ(), "PATH="+bin+":"+os.Getenv("PATH"), "FAKE_STATUS="+tc.status)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Errorf("status %s: the line failed: %v\n%s", tc.status, err, out)
		}
		if string(out) != tc.want {
			t.Errorf("status %s: the line printed %q, want %q (cron mails what it prints)", tc.status, out, tc.want)
		}
	}
}
