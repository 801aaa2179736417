package cli

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/kvelect/election"
	"go.yaml.in/yaml/v3"
)

// agentDaemon is a daemon of election agent: a shell command.
type agentDaemon struct {
	Name    string
	Command string
	Grace   time.Duration // 0: the agent's --grace
	Env     map[string]string
	// HealthCmd, if set, is a shell command that exits 0 while this node
	// can run the daemon (fleet.Daemon.Health); HealthInterval and
	// HealthFailures are its interval and failures in a row, 0 for the
	// agent's --health-interval and --health-failures.
	HealthCmd      string
	HealthInterval time.Duration
	HealthFailures int
}

// agentFileFields and agentDaemonFields are the fields a --config file may
// have: at the top, and in each daemon.
var (
	agentFileFields   = []string{"daemons"}
	agentDaemonFields = []string{"name", "command", "grace", "env", "health_cmd", "health_interval", "health_failures"}
)

// readAgentFile reads the daemons of a --config file. It reads the YAML
// nodes itself, rather than decoding into Go types, so that each error
// names the line, the field and what is allowed in the file's own terms.
func readAgentFile(path string) ([]agentDaemon, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("--config: %w", err)
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, fmt.Errorf("--config %s: %s", path, yamlProblem(data, err))
	}
	daemons, err := agentFileOf(&doc)
	if err != nil {
		return nil, fmt.Errorf("--config %s: %w", path, err)
	}
	for i, d := range daemons {
		what := fmt.Sprintf("--config %s: daemon %d", path, i+1)
		if d.Name != "" {
			what = fmt.Sprintf("--config %s: daemon %q", path, d.Name)
		}
		if err := d.check(what); err != nil {
			return nil, err
		}
	}
	return daemons, nil
}

// yamlProblem describes a YAML syntax error at the line where it is. The
// parser reports some errors, a mis-indented key among them, at the line
// of the block that contains it; the first line at which the file's
// beginning fails to parse with the same error is the line at fault.
func yamlProblem(data []byte, err error) string {
	what := yamlMessage(err)
	lines := strings.SplitAfter(string(data), "\n")
	for n := 1; n <= len(lines); n++ {
		var doc yaml.Node
		if e := yaml.Unmarshal([]byte(strings.Join(lines[:n], "")), &doc); e != nil && yamlMessage(e) == what {
			return fmt.Sprintf("line %d: %s (is it indented as the lines above it?): %s", n, what, strings.TrimSpace(lines[n-1]))
		}
	}
	return err.Error()
}

// yamlMessage is a YAML error's message without its "yaml: line N:" prefix.
func yamlMessage(err error) string {
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	if rest, ok := strings.CutPrefix(msg, "line "); ok {
		if _, after, ok := strings.Cut(rest, ": "); ok {
			return after
		}
	}
	return msg
}

// agentFileOf reads the daemons of a --config file's document.
func agentFileOf(doc *yaml.Node) ([]agentDaemon, error) {
	if doc.Kind == 0 || len(doc.Content) == 0 { // an empty file
		return nil, nil
	}
	top := doc.Content[0]
	if top.Kind != yaml.MappingNode {
		return nil, fmt.Errorf("line %d: want daemons: a list of daemons, each with name, command, and optional grace, env and health_cmd", top.Line)
	}
	var daemons []agentDaemon
	for i := 0; i+1 < len(top.Content); i += 2 {
		key, value := top.Content[i], top.Content[i+1]
		if key.Value != "daemons" {
			return nil, unknownField(key, "at the top", agentFileFields)
		}
		if value.Kind == yaml.ScalarNode && value.Tag == "!!null" {
			continue
		}
		if value.Kind != yaml.SequenceNode {
			return nil, fmt.Errorf("line %d: daemons: want a list, each item beginning with -", value.Line)
		}
		for n, item := range value.Content {
			d, err := agentDaemonOf(item, n+1)
			if err != nil {
				return nil, err
			}
			daemons = append(daemons, d)
		}
	}
	return daemons, nil
}

// agentDaemonOf reads the n-th daemon of a --config file.
func agentDaemonOf(item *yaml.Node, n int) (agentDaemon, error) {
	var d agentDaemon
	if item.Kind != yaml.MappingNode {
		return d, fmt.Errorf("line %d: daemon %d: want fields %s", item.Line, n, strings.Join(agentDaemonFields, ", "))
	}
	for i := 0; i+1 < len(item.Content); i += 2 {
		key, value := item.Content[i], item.Content[i+1]
		if key.Value == "env" {
			if value.Kind != yaml.MappingNode || value.Decode(&d.Env) != nil {
				return d, fmt.Errorf("line %d: env of daemon %d: want NAME: value pairs, such as env: {MODE: fast}", value.Line, n)
			}
			continue
		}
		if !slices.Contains(agentDaemonFields, key.Value) {
			return d, unknownField(key, fmt.Sprintf("in daemon %d", n), agentDaemonFields)
		}
		if value.Kind != yaml.ScalarNode {
			return d, fmt.Errorf("line %d: %s of daemon %d: want a single value", value.Line, key.Value, n)
		}
		switch key.Value {
		case "name":
			d.Name = value.Value
		case "command":
			d.Command = value.Value
		case "grace":
			grace, err := time.ParseDuration(value.Value)
			if err != nil {
				return d, fmt.Errorf("line %d: grace %s of daemon %d: write a duration such as 30s", value.Line, value.Value, n)
			}
			d.Grace = grace
		case "health_cmd":
			d.HealthCmd = value.Value
			if strings.TrimSpace(d.HealthCmd) == "" {
				return d, fmt.Errorf("line %d: health_cmd of daemon %d is empty: give a shell command that exits 0 while this node can run the daemon, or leave the field out", value.Line, n)
			}
		case "health_interval":
			interval, err := time.ParseDuration(value.Value)
			if err != nil {
				return d, fmt.Errorf("line %d: health_interval %s of daemon %d: write a duration such as 5s", value.Line, value.Value, n)
			}
			if interval < election.MinHealthInterval {
				return d, fmt.Errorf("line %d: health_interval %s of daemon %d: want at least %v", value.Line, value.Value, n, election.MinHealthInterval)
			}
			d.HealthInterval = interval
		case "health_failures":
			failures, err := strconv.Atoi(value.Value)
			if err != nil || failures < 1 {
				return d, fmt.Errorf("line %d: health_failures %s of daemon %d: write a whole number, 1 or more, such as 3", value.Line, value.Value, n)
			}
			d.HealthFailures = failures
		}
	}
	if d.HealthCmd == "" && (d.HealthInterval != 0 || d.HealthFailures != 0) {
		return d, fmt.Errorf("line %d: daemon %d has health_interval or health_failures but no health_cmd: give health_cmd, or neither", item.Line, n)
	}
	return d, nil
}

// unknownField says that key is not a field allowed where it is.
func unknownField(key *yaml.Node, where string, allowed []string) error {
	hint := ""
	if slices.Contains(agentDaemonFields, key.Value) && !slices.Contains(allowed, key.Value) {
		hint = " (a daemon's field: is it indented under its - name?)"
	}
	return fmt.Errorf("line %d: unknown field %q %s%s; allowed: %s", key.Line, key.Value, where, hint, strings.Join(allowed, ", "))
}

// daemonFlags is --daemon NAME=COMMAND, repeatable.
type daemonFlags struct{ daemons *[]agentDaemon }

func (f daemonFlags) String() string { return "" }

func (f daemonFlags) Set(value string) error {
	name, command, ok := strings.Cut(value, "=")
	if !ok {
		return fmt.Errorf("%q: want NAME=COMMAND", value)
	}
	d := agentDaemon{Name: name, Command: command}
	if err := d.check(fmt.Sprintf("daemon %q", name)); err != nil {
		return err
	}
	*f.daemons = append(*f.daemons, d)
	return nil
}

// healthCmdFlags is --health-cmd NAME=COMMAND, repeatable: the health
// command of the daemon NAME, given by --daemon or the file.
type healthCmdFlags struct{ cmds map[string]string }

func (f healthCmdFlags) String() string { return "" }

func (f healthCmdFlags) Set(value string) error {
	name, command, ok := strings.Cut(value, "=")
	switch {
	case !ok || name == "":
		return fmt.Errorf("%q: want NAME=COMMAND, NAME a daemon's", value)
	case strings.TrimSpace(command) == "":
		return fmt.Errorf("daemon %q: empty health command", name)
	case f.cmds[name] != "":
		return fmt.Errorf("daemon %q: health command given twice", name)
	}
	f.cmds[name] = command
	return nil
}

// withHealthCmds gives each daemon its --health-cmd, refusing one for a
// daemon that is not given, or that has a health_cmd in the file.
func withHealthCmds(daemons []agentDaemon, cmds map[string]string) error {
	for name, command := range cmds {
		i := slices.IndexFunc(daemons, func(d agentDaemon) bool { return d.Name == name })
		switch {
		case i < 0:
			return fmt.Errorf("--health-cmd %s=…: no daemon %q is given (with --daemon or in --config)", name, name)
		case daemons[i].HealthCmd != "":
			return fmt.Errorf("--health-cmd %s=…: daemon %q has a health_cmd in --config already", name, name)
		}
		daemons[i].HealthCmd = command
	}
	return nil
}

// labelFlags is --label KEY=VALUE, repeatable.
type labelFlags struct{ labels map[string]string }

func (f labelFlags) String() string { return "" }

func (f labelFlags) Set(value string) error {
	k, v, ok := strings.Cut(value, "=")
	if !ok || k == "" || strings.Contains(k, ",") {
		return fmt.Errorf("%q: want KEY=VALUE, KEY without , or =", value)
	}
	f.labels[k] = v
	return nil
}

// check says what is wrong with the daemon, beginning with what.
func (d agentDaemon) check(what string) error {
	switch {
	case d.Name == "":
		return fmt.Errorf("%s has no name", what)
	case strings.TrimSpace(d.Command) == "":
		return fmt.Errorf("%s has an empty command", what)
	case d.Grace < 0:
		return fmt.Errorf("%s: grace %v: want 0 (the agent's --grace) or more", what, d.Grace)
	}
	for k := range d.Env {
		if k == "" || strings.Contains(k, "=") {
			return fmt.Errorf("%s: environment variable %q: want a name without =", what, k)
		}
	}
	return nil
}

// mergeDaemons joins the daemons of the flags and of the file, refusing a
// name given twice.
func mergeDaemons(flags, file []agentDaemon) ([]agentDaemon, error) {
	all := slices.Concat(flags, file)
	seen := map[string]bool{}
	for _, d := range all {
		if seen[d.Name] {
			return nil, fmt.Errorf("daemon %q is given twice", d.Name)
		}
		seen[d.Name] = true
	}
	if len(all) == 0 {
		return nil, errors.New("no daemon given: --daemon NAME=COMMAND or --config FILE")
	}
	return all, nil
}
