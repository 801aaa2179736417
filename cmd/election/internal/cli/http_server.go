package cli

import (
	"encoding/json"
	"net/http"
	"time"
)

// shutdownTimeout bounds how long an HTTP server of the commands (run's
// and sidecar's --metrics, the sidecar's, the dashboard's) waits for
// requests in flight when it stops.
const shutdownTimeout = 5 * time.Second

// writeJSON writes v as a JSON response.
func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(v)
}
