package cli

import "time"

// The fleet's nodes and daemons as election status --json and the
// dashboard's /fleet answer them.

// nodeJSON is a fleet's node as --json prints it.
type nodeJSON struct {
	Node       string            `json:"node"`
	Since      time.Time         `json:"since"`
	AgeSeconds float64           `json:"age_seconds"`
	Capacity   int               `json:"capacity"`
	Priority   int               `json:"priority,omitempty"`
	Prefer     bool              `json:"prefer_higher,omitempty"`
	Labels     map[string]string `json:"labels,omitempty"`
	Version    string            `json:"version,omitempty"`
	CanRun     []string          `json:"can_run"` // the daemons it offers
	Running    []string          `json:"running"`
	// Unhealthy says, for each daemon the node lists but does not offer,
	// why its health check fails (fleet.Member.Unhealthy).
	Unhealthy map[string]string `json:"unhealthy,omitempty"`
}

// daemonJSON is a fleet's daemon as --json prints it.
type daemonJSON struct {
	Daemon    string     `json:"daemon"`
	Node      string     `json:"node"`
	State     string     `json:"state"`
	Token     uint64     `json:"token,omitempty"`
	Since     *time.Time `json:"since,omitempty"`
	Restarts  int        `json:"restarts,omitempty"`
	Restarted *time.Time `json:"restarted,omitempty"` // when it last exited by itself, by its node's clock
	LastError string     `json:"last_error,omitempty"`
}
