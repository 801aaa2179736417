package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// agentDaemon is a daemon of election agent: a shell command.
type agentDaemon struct {
	Name    string            `yaml:"name"`
	Command string            `yaml:"command"`
	Grace   time.Duration     `yaml:"grace"` // 0: the agent's --grace
	Env     map[string]string `yaml:"env"`
}

// agentFile is the file --config reads.
type agentFile struct {
	Daemons []agentDaemon `yaml:"daemons"`
}

// readAgentFile reads the daemons of a --config file, refusing fields it
// does not know.
func readAgentFile(path string) ([]agentDaemon, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("--config: %w", err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	var f agentFile
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("--config %s: %w (want daemons: a list of name, command, and optional grace and env)", path, err)
	}
	for i, d := range f.Daemons {
		what := fmt.Sprintf("--config %s: daemon %d", path, i+1)
		if d.Name != "" {
			what = fmt.Sprintf("--config %s: daemon %q", path, d.Name)
		}
		if err := d.check(what); err != nil {
			return nil, err
		}
	}
	return f.Daemons, nil
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
