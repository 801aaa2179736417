package topology

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"time"
)

// Formed reports whether the servers work together, as their monitoring
// endpoints say (every server must run): every gateway out is up and every
// region hears from every other, the leaf node link is up, every clustered
// server has a route to each other server of its cluster and agrees on one
// JetStream meta leader of a group of them all, that leader sees every
// other member current, and every server is healthy. Until then creating a
// bucket can time out. When it is not formed, it also says what is missing.
func (t *Topology) Formed() (bool, string) {
	regions := t.Regions()
	gateways := slices.ContainsFunc(t.Servers, func(s *Server) bool { return s.GatewayPort != 0 })
	heard := map[string]map[string]bool{} // by region, the regions whose gateways reached it
	leaders := map[string]bool{}
	clustered := 0
	for _, s := range t.Servers {
		if err := s.Monitor("/healthz", &struct{}{}); err != nil {
			return false, err.Error()
		}
		if gateways {
			var gw struct {
				Outbound map[string]any `json:"outbound_gateways"`
				Inbound  map[string]any `json:"inbound_gateways"`
			}
			if err := s.Monitor("/gatewayz", &gw); err != nil {
				return false, err.Error()
			}
			if len(gw.Outbound) != len(regions)-1 {
				return false, fmt.Sprintf("%s: %d gateways out, want %d", s.Name, len(gw.Outbound), len(regions)-1)
			}
			if heard[s.Region] == nil {
				heard[s.Region] = map[string]bool{}
			}
			for region := range gw.Inbound {
				heard[s.Region][region] = true
			}
		}
		if s.LeafPort != 0 || s.LeafRemote != "" {
			var leafz struct {
				Leafs int `json:"leafnodes"`
			}
			if err := s.Monitor("/leafz", &leafz); err != nil || leafz.Leafs == 0 {
				return false, fmt.Sprintf("%s: no leaf node link (%v)", s.Name, err)
			}
		}
		if s.Cluster == "" {
			continue
		}
		clustered++
		if missing := t.routed(s); missing != "" {
			return false, missing
		}
		leader, missing := metaLeader(s, t.clustered())
		if missing != "" {
			return false, missing
		}
		leaders[leader] = true
	}
	for _, region := range regions {
		if gateways && len(heard[region]) != len(regions)-1 {
			return false, fmt.Sprintf("region %s hears from the gateways of %d regions, want %d", region, len(heard[region]), len(regions)-1)
		}
	}
	if clustered > 0 && len(leaders) != 1 {
		return false, fmt.Sprintf("meta leaders %v", slices.Sorted(maps.Keys(leaders)))
	}
	return true, ""
}

// clustered counts the servers that belong to a cluster: the meta group's
// members.
func (t *Topology) clustered() int {
	n := 0
	for _, s := range t.Servers {
		if s.Cluster != "" {
			n++
		}
	}
	return n
}

// routed returns what s misses of its routes to its cluster's other
// servers, "" if nothing.
func (t *Topology) routed(s *Server) string {
	var routez struct {
		Routes []struct {
			Remote string `json:"remote_name"`
		} `json:"routes"`
	}
	if err := s.Monitor("/routez", &routez); err != nil {
		return err.Error()
	}
	peers := map[string]bool{}
	for _, r := range routez.Routes {
		peers[r.Remote] = true
	}
	for _, peer := range t.Servers {
		if peer != s && peer.Cluster == s.Cluster && !peers[peer.Name] {
			return fmt.Sprintf("%s: no route to %s", s.Name, peer.Name)
		}
	}
	return ""
}

// metaLeader returns the JetStream meta leader s knows of, or what is
// missing: a leader of a group of size, which, if s is the leader, sees
// every other member current.
func metaLeader(s *Server, size int) (string, string) {
	var jsz struct {
		Meta *struct {
			Leader   string `json:"leader"`
			Size     int    `json:"cluster_size"`
			Replicas []struct {
				Current bool `json:"current"`
			} `json:"replicas"`
		} `json:"meta_cluster"`
	}
	if err := s.Monitor("/jsz", &jsz); err != nil || jsz.Meta == nil || jsz.Meta.Leader == "" || jsz.Meta.Size != size {
		return "", fmt.Sprintf("%s: no meta group of %d with a leader (%v)", s.Name, size, err)
	}
	if jsz.Meta.Leader == s.Name {
		current := 0
		for _, r := range jsz.Meta.Replicas {
			if r.Current {
				current++
			}
		}
		if current != size-1 {
			return "", fmt.Sprintf("meta leader %s: %d of its followers current, want %d", s.Name, current, size-1)
		}
	}
	return jsz.Meta.Leader, ""
}

// AwaitFormed waits until Formed, for at most timeout or until ctx is
// done. Nothing announces it, so it asks every 100 ms.
func (t *Topology) AwaitFormed(ctx context.Context, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		formed, missing := t.Formed()
		if formed {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the servers did not form within %v: %s", timeout, missing)
		case <-tick.C:
		}
	}
}
