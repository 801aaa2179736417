package cli

import (
	"os"
	"path/filepath"
	"reflect"
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

// TestAgentConfigReadsHealthChecks reads a daemon's health_cmd,
// health_interval and health_failures, and refuses bad ones naming the
// line, the field and what is allowed.
func TestAgentConfigReadsHealthChecks(t *testing.T) {
	t.Parallel()
	const daemon = "daemons:\n  - name: x\n    command: a\n"
	for name, tc := range map[string]struct {
		yaml string
		want agentDaemon // when good
		says string      // when bad
	}{
		"a health command": {yaml: daemon + "    health_cmd: test -e /tmp/ok\n",
			want: agentDaemon{Name: "x", Command: "a", HealthCmd: "test -e /tmp/ok"}},
		"all three": {yaml: daemon + "    health_cmd: pg_isready\n    health_interval: 2s\n    health_failures: 5\n",
			want: agentDaemon{Name: "x", Command: "a", HealthCmd: "pg_isready", HealthInterval: 2 * time.Second, HealthFailures: 5}},
		"the shortest interval": {yaml: daemon + "    health_cmd: c\n    health_interval: 10ms\n    health_failures: 1\n",
			want: agentDaemon{Name: "x", Command: "a", HealthCmd: "c", HealthInterval: 10 * time.Millisecond, HealthFailures: 1}},
		"an empty health command": {yaml: daemon + "    health_cmd: \" \"\n",
			says: "line 4: health_cmd of daemon 1 is empty: give a shell command that exits 0 while this node can run the daemon, or leave the field out"},
		"an interval without a unit": {yaml: daemon + "    health_cmd: c\n    health_interval: 5\n",
			says: "line 5: health_interval 5 of daemon 1: write a duration such as 5s"},
		"an interval too short": {yaml: daemon + "    health_cmd: c\n    health_interval: 1ms\n",
			says: "line 5: health_interval 1ms of daemon 1: want at least 10ms"},
		"no failures": {yaml: daemon + "    health_cmd: c\n    health_failures: 0\n",
			says: "line 5: health_failures 0 of daemon 1: write a whole number, 1 or more, such as 3"},
		"failures not a number": {yaml: daemon + "    health_cmd: c\n    health_failures: three\n",
			says: "line 5: health_failures three of daemon 1: write a whole number"},
		"an interval without a command": {yaml: daemon + "    health_interval: 5s\n",
			says: "line 2: daemon 1 has health_interval or health_failures but no health_cmd: give health_cmd, or neither"},
		"a list for a command": {yaml: daemon + "    health_cmd: [a, b]\n",
			says: "line 4: health_cmd of daemon 1: want a single value"},
		"a misspelt field": {yaml: daemon + "    health_command: c\n",
			says: `line 4: unknown field "health_command" in daemon 1; allowed: name, command, grace, env, health_cmd, health_interval, health_failures`},
	} {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "daemons.yaml")
			if err := os.WriteFile(path, []byte(tc.yaml), 0o600); err != nil {
				t.Fatal(err)
			}
			daemons, err := readAgentFile(path)
			if tc.says != "" {
				if err == nil || !strings.Contains(err.Error(), tc.says) {
					t.Errorf("%v, want an error saying %q", err, tc.says)
				}
				return
			}
			if err != nil || len(daemons) != 1 || !reflect.DeepEqual(daemons[0], tc.want) {
				t.Errorf("read %+v, %v; want %+v", daemons, err, tc.want)
			}
		})
	}
}
