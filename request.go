package election

import "strings"

// Requests to a key's leader travel through the bucket: Bucket.Resign and
// Bucket.Transfer write the key "_kvelect.request." and the election key,
// which every candidate of the key watches. The leader acts on a request
// written after its own claim (a higher revision), so a request is served
// once, by the leader it was meant for, and ages out with the bucket's TTL.
const (
	// reservedPrefix starts every key kvelect writes for itself; no election
	// key may start with it.
	reservedPrefix = "_kvelect."
	requestPrefix  = reservedPrefix + "request."
	resignRequest  = "resign"
	transferPrefix = "transfer:"
)

func requestKey(key string) string { return requestPrefix + key }

// parseRequest returns the candidate a request asks the leader to hand the
// key to: "" for a resignation (any other candidate).
func parseRequest(value []byte) (to string, ok bool) {
	if string(value) == resignRequest {
		return "", true
	}
	to, ok = strings.CutPrefix(string(value), transferPrefix)
	return to, ok && to != ""
}
