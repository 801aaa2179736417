//go:build unix

package harness

import (
	"encoding/json"
	"time"

	"github.com/kvelect/election/cmd/chaos/check"
	"github.com/kvelect/election/cmd/chaos/record"
	"github.com/kvelect/election/cmd/chaos/worker"
	"github.com/kvelect/election/internal/topology"
	"github.com/nats-io/nats-server/v2/server"
)

// replicaSettle is how long the replicas of the bucket's stream have, once
// every worker has stopped, to agree before the run counts them as
// different: a follower that was paused or down catches up from the leader.
const replicaSettle = 15 * time.Second

// checkReplicas reads every server's copy of the bucket's stream from its
// monitoring endpoint until they agree or replicaSettle passes, and records
// the last reading ("replicas"), for the checker.
func (h *Harness) checkReplicas() {
	deadline := time.Now().Add(replicaSettle)
	var states []check.Replica
	for {
		states = states[:0]
		for _, sp := range h.servers {
			states = append(states, readReplica(sp, "KV_"+worker.BucketName))
		}
		if check.ReplicasAgree(states) || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	data, _ := json.Marshal(states)
	h.rec.Record(record.Event{Kind: "replicas", Cause: string(data)})
}

// readReplica reads sp's copy of stream from its /jsz endpoint.
func readReplica(sp *topology.Process, stream string) check.Replica {
	st := check.Replica{Server: sp.Server.Name}
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
