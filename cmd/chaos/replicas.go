//go:build unix

package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/kvelect/election/internal/topology"
	"github.com/nats-io/nats-server/v2/server"
)

// replicaSettle is how long the replicas of the bucket's stream have, once
// every worker has stopped, to agree before the run counts them as
// different: a follower that was paused or down catches up from the leader.
const replicaSettle = 15 * time.Second

// replicaState is one server's copy of the bucket's stream.
type replicaState struct {
	Server   string `json:"server"`
	Msgs     uint64 `json:"msgs"`
	FirstSeq uint64 `json:"first_seq"`
	LastSeq  uint64 `json:"last_seq"`
	Err      string `json:"err,omitempty"`
}

// checkReplicas reads every server's copy of the bucket's stream from its
// monitoring endpoint until they agree or replicaSettle passes, and records
// the last reading ("replicas"), for the checker.
func (h *harness) checkReplicas() {
	deadline := time.Now().Add(replicaSettle)
	var states []replicaState
	for {
		states = states[:0]
		for _, sp := range h.servers {
			states = append(states, readReplica(sp, "KV_"+bucketName))
		}
		if replicasAgree(states) || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	data, _ := json.Marshal(states)
	h.rec.record(Event{Kind: "replicas", Cause: string(data)})
}

// readReplica reads sp's copy of stream from its /jsz endpoint.
func readReplica(sp *topology.Process, stream string) replicaState {
	st := replicaState{Server: sp.Server.Name}
	var info server.JSInfo
	if err := sp.Server.Monitor("/jsz?accounts=true&streams=true", &info); err != nil {
		st.Err = err.Error()
		return st
	}
	for _, acc := range info.AccountDetails {
		for _, s := range acc.Streams {
			if s.Name == stream {
				st.Msgs, st.FirstSeq, st.LastSeq = s.State.Msgs, s.State.FirstSeq, s.State.LastSeq
				return st
			}
		}
	}
	st.Err = "no copy of " + stream
	return st
}

// replicasAgree reports whether every copy was read and all hold the same
// messages: count, first and last sequence.
func replicasAgree(states []replicaState) bool {
	for _, s := range states {
		if s.Err != "" || s.Msgs != states[0].Msgs || s.FirstSeq != states[0].FirstSeq || s.LastSeq != states[0].LastSeq {
			return false
		}
	}
	return len(states) > 0
}

// checkReplicaEvents reports what the harness read of the replicas at the
// end of a cluster run.
func checkReplicaEvents(rep *report, harness []Event) {
	for _, ev := range harness {
		if ev.Kind != "replicas" {
			continue
		}
		var states []replicaState
		if err := json.Unmarshal([]byte(ev.Cause), &states); err != nil {
			rep.Problems = append(rep.Problems, "reading the replicas' states: "+err.Error())
			continue
		}
		agree := replicasAgree(states)
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
