package embedded

import (
	"encoding/json"
	"fmt"
	"net/http"
	"time"
)

// SuperclusterFormed reports whether the servers whose HTTP monitoring
// endpoints are at monitors ("http://127.0.0.1:8222", one server per
// cluster) form a supercluster ready for JetStream, as nats-server's own
// tests wait for it: every gateway up both ways, every server agreeing on
// one JetStream meta leader of a group of them all, that leader seeing
// every other member current, and every server healthy. Until then a
// bucket's creation can time out. When it is not formed, it also says what
// is missing.
func SuperclusterFormed(monitors []string) (bool, string) {
	client := http.Client{Timeout: time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	get := func(base, path string, v any) error {
		resp, err := client.Get(base + path)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("%s: %s", path, resp.Status)
		}
		return json.NewDecoder(resp.Body).Decode(v)
	}
	others := len(monitors) - 1
	leaders := map[string]bool{}
	for _, base := range monitors {
		var varz struct {
			Name string `json:"server_name"`
		}
		var gw struct {
			Outbound map[string]any `json:"outbound_gateways"`
			Inbound  map[string]any `json:"inbound_gateways"`
		}
		var jsz struct {
			Meta *struct {
				Leader   string `json:"leader"`
				Size     int    `json:"cluster_size"`
				Replicas []struct {
					Current bool `json:"current"`
				} `json:"replicas"`
			} `json:"meta_cluster"`
		}
		if err := get(base, "/varz", &varz); err != nil {
			return false, err.Error()
		}
		if err := get(base, "/gatewayz", &gw); err != nil {
			return false, err.Error()
		}
		if len(gw.Outbound) != others || len(gw.Inbound) != others {
			return false, fmt.Sprintf("%s: gateways out %d, in %d, want %d", base, len(gw.Outbound), len(gw.Inbound), others)
		}
		if err := get(base, "/jsz", &jsz); err != nil || jsz.Meta == nil || jsz.Meta.Leader == "" || jsz.Meta.Size != len(monitors) {
			return false, fmt.Sprintf("%s: no meta group of %d with a leader (%v)", base, len(monitors), err)
		}
		leaders[jsz.Meta.Leader] = true
		current := 0
		for _, r := range jsz.Meta.Replicas {
			if r.Current {
				current++
			}
		}
		if jsz.Meta.Leader == varz.Name && current != others {
			return false, fmt.Sprintf("meta leader %s: %d of its followers current, want %d", varz.Name, current, others)
		}
		if err := get(base, "/healthz", &struct{}{}); err != nil {
			return false, fmt.Sprintf("%s: %v", base, err)
		}
	}
	if len(leaders) != 1 {
		return false, fmt.Sprintf("meta leaders %v", leaders)
	}
	return true, ""
}
