package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"time"

	"github.com/kvelect/election/history"
)

// printJSONLine writes v as one JSON object on a line of its own, as the
// commands print with --json.
func printJSONLine(w io.Writer, v any) {
	data, _ := json.Marshal(v) // plain structs: cannot fail
	fmt.Fprintf(w, "%s\n", data)
}

// historyJSON is one event as election history --json prints it and the
// dashboard serves it.
type historyJSON struct {
	history.Event
	At time.Time `json:"at"`
}

// writeJSONIndent writes v as indented JSON.
func writeJSONIndent(w io.Writer, v any) {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.Encode(v)
}
