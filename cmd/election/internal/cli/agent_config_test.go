package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestAgentConfigErrorsNameTheLineAndWhatIsAllowed reads bad --config
// files: each error names the line at fault and what is allowed there, in
// the file's terms, not Go's.
func TestAgentConfigErrorsNameTheLineAndWhatIsAllowed(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		yaml string
		says []string
	}{
		"misspelt field": {"daemons:\n  - name: x\n    comand: a\n",
			[]string{`line 3: unknown field "comand" in daemon 1; allowed: name, command, grace, env`}},
		"unknown top field": {"deamons:\n  - name: x\n",
			[]string{`line 1: unknown field "deamons" at the top; allowed: daemons`}},
		"grace without a unit": {"daemons:\n  - name: x\n    command: a\n    grace: 30\n",
			[]string{`line 4: grace 30 of daemon 1: write a duration such as 30s`}},
		"key indented less": {"daemons:\n  - name: x\n    command: a\n  grace: 30s\n",
			[]string{"line 4: did not find expected '-' indicator", "grace: 30s"}},
		"key indented less by one": {"daemons:\n  - name: x\n    command: a\n   grace: 30s\n",
			[]string{"line 4: ", "grace: 30s"}},
		"key indented more": {"daemons:\n  - name: x\n    command: a\n      grace: 30s\n",
			[]string{"line 4: mapping values are not allowed in this context", "grace: 30s"}},
		"daemon field at the top": {"daemons:\n- name: x\n  command: a\ngrace: 30s\n",
			[]string{`line 4: unknown field "grace" at the top (a daemon's field: is it indented under its - name?); allowed: daemons`}},
		"env not a mapping": {"daemons:\n  - name: x\n    command: a\n    env: [A]\n",
			[]string{"line 4: env of daemon 1: want NAME: value pairs"}},
	} {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "daemons.yaml")
			if err := os.WriteFile(path, []byte(tc.yaml), 0o600); err != nil {
				t.Fatal(err)
			}
			_, err := readAgentFile(path)
			if err == nil {
				t.Fatalf("no error for %q", tc.yaml)
			}
			for _, s := range tc.says {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("%v: does not say %q", err, s)
				}
			}
			if strings.Contains(err.Error(), "main.") || strings.Contains(err.Error(), "time.Duration") {
				t.Errorf("%v: names a Go type", err)
			}
		})
	}
}

func TestAgentConfigReadsAGoodFile(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "daemons.yaml")
	yaml := "# daemons\ndaemons:\n  - name: x\n    command: ./relay --batch 100\n    grace: 30s\n    env: {MODE: fast}\n  - name: y\n    command: b\n"
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	daemons, err := readAgentFile(path)
	if err != nil || len(daemons) != 2 || daemons[0].Name != "x" || daemons[0].Command != "./relay --batch 100" ||
		daemons[0].Grace != 30*time.Second || daemons[0].Env["MODE"] != "fast" || daemons[1].Name != "y" || daemons[1].Grace != 0 {
		t.Errorf("read %+v, %v", daemons, err)
	}
}
