//go:build unix

package check

import (
	"os"
	"path/filepath"
	"strings"

	"github.com/kvelect/election/cmd/chaos/record"
)

// history is everything one run recorded.
type history struct {
	harness []record.Event
	workers map[string][]record.Event
	audit   []record.Event
	fence   []record.Event
	// leadership is what the bucket's leadership history recorded; nil for
	// a run without one.
	leadership []record.Event
	// actors are the records of an -agents run's actors, one slice per
	// actor; each node's are in workers too.
	actors [][]record.Event
}

// loadHistory reads every history file of the run in dir.
func loadHistory(dir string) (*history, error) {
	h := &history{workers: map[string][]record.Event{}}
	var err error
	if h.harness, err = record.Read(filepath.Join(dir, "harness.jsonl")); err != nil {
		return nil, err
	}
	if h.audit, err = record.Read(filepath.Join(dir, "audit.jsonl")); err != nil {
		return nil, err
	}
	if h.fence, err = record.Read(filepath.Join(dir, "fence.jsonl")); err != nil && !os.IsNotExist(err) {
		return nil, err
	}
	if h.leadership, err = record.Read(filepath.Join(dir, "leadership.jsonl")); err != nil && !os.IsNotExist(err) {
		return nil, err
	}
	files, err := filepath.Glob(filepath.Join(dir, "worker-*.jsonl"))
	if err != nil {
		return nil, err
	}
	for _, f := range files {
		events, err := record.Read(f)
		if err != nil {
			return nil, err
		}
		name := strings.TrimSuffix(strings.TrimPrefix(filepath.Base(f), "worker-"), ".jsonl")
		h.workers[name] = events
	}
	if err := loadActors(dir, h); err != nil {
		return nil, err
	}
	return h, nil
}
