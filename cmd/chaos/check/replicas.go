//go:build unix

package check

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/kvelect/election/cmd/chaos/record"
)

// Replica is one server's copy of the bucket's stream.
type Replica struct {
	Server   string `json:"server"`
	Msgs     uint64 `json:"msgs"`
	FirstSeq uint64 `json:"first_seq"`
	LastSeq  uint64 `json:"last_seq"`
	Err      string `json:"err,omitempty"`
}

// ReplicasAgree reports whether every copy was read and all hold the same
// messages: count, first and last sequence.
func ReplicasAgree(states []Replica) bool {
	for _, s := range states {
		if s.Err != "" || s.Msgs != states[0].Msgs || s.FirstSeq != states[0].FirstSeq || s.LastSeq != states[0].LastSeq {
			return false
		}
	}
	return len(states) > 0
}

// checkReplicaEvents reports what the harness read of the replicas at the
// end of a cluster run.
func checkReplicaEvents(rep *Report, harness []record.Event) {
	for _, ev := range harness {
		if ev.Kind != "replicas" {
			continue
		}
		var states []Replica
		if err := json.Unmarshal([]byte(ev.Cause), &states); err != nil {
			rep.Problems = append(rep.Problems, "reading the replicas' states: "+err.Error())
			continue
		}
		agree := ReplicasAgree(states)
		rep.ReplicasAgree = &agree
		if !agree {
			var parts []string
			for _, s := range states {
				parts = append(parts, fmt.Sprintf("%s: %d messages, %d–%d %s", s.Server, s.Msgs, s.FirstSeq, s.LastSeq, s.Err))
			}
			rep.Problems = append(rep.Problems, "the replicas of the bucket's stream differ: "+strings.Join(parts, "; "))
		}
	}
}
