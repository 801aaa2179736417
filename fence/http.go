package fence

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"

	"github.com/kvelect/election"
)

// DefaultResource is the resource of every request of an HTTP fence made
// without WithResource: one highest token for the whole wrapped handler.
const DefaultResource = "default"

// HTTP is a fence for a service that receives a leader's work over HTTP:
// its Handler reads the request's Fencing-Token header
// (election.TokenHeader), refuses a token lower than the highest it has
// accepted for the request's resource with 409 Conflict, and runs the
// wrapped handler otherwise. It is safe for concurrent use.
//
// # What it guarantees
//
// For each resource, the check and the wrapped handler run under one lock:
// a request is checked, its token recorded as the highest, and the wrapped
// handler run to its return before the next request of that resource is
// checked. So no effect of a request with a lower token lands after, or
// interleaved with, that of a request with a higher one, as long as the
// handler's effects happen before it returns (not in goroutines it leaves
// running). Requests of one resource are therefore served one at a time;
// choose resources (WithResource) as fine as the work allows. A request
// that waits for the lock gives up when its context ends, with 503.
//
// # Answers
//
//   - 400 Bad Request for a missing, repeated or malformed Fencing-Token
//     header, or an empty resource; the body names the header and what a
//     token may be. The fence never guesses a token.
//   - 409 Conflict for a stale token; the body names the resource, the
//     token and the highest accepted (StaleError's message).
//   - 503 Service Unavailable if the request ended while waiting, or the
//     KV fence behind it (WithKV) could not be reached; 500 if a resource
//     is not a valid KV key for it.
//
// # Limits
//
// The highest tokens live in this process's memory: a restart forgets them,
// and each replica of the service keeps its own. Persist them with Seed
// (the highest tokens saved before a restart, or read from where the work
// lands) or, to survive restarts and share them among replicas, back the
// fence with a KV fence (WithKV), at one compare-and-set per request. Even
// then the lock is per process: two replicas may run handlers of one
// resource at once, so fence the effect itself (the KV or stream fence, a
// guarded SQL UPDATE) where replicas share it. Memory grows with the
// number of distinct resources.
type HTTP struct {
	resource func(*http.Request) string
	kv       *KV

	mu     sync.Mutex
	states map[string]*resourceState
}

// resourceState is the fence of one resource.
type resourceState struct {
	lock    chan struct{} // held (full) while a request of the resource is checked and handled
	highest atomic.Uint64 // written only under lock
}

// HTTPOption configures an HTTP fence.
type HTTPOption func(*HTTP) error

// WithResource makes resource choose the resource of each request (from its
// path, a path value, a header); all requests of a resource share one
// highest token. Without it every request is of DefaultResource. An empty
// resource is refused with 400.
func WithResource(resource func(*http.Request) string) HTTPOption {
	return func(h *HTTP) error {
		if resource == nil {
			return invalidf("nil resource function")
		}
		h.resource = resource
		return nil
	}
}

// WithKV backs the fence with a KV fence: every request's token is also
// written, with no data, to the key named by its resource (which must then
// be a valid KV key), by KV.Put, before the wrapped handler runs. The
// highest tokens then survive restarts and are shared by the replicas
// that use the bucket.
func WithKV(kv *KV) HTTPOption {
	return func(h *HTTP) error {
		if kv == nil {
			return invalidf("nil KV fence")
		}
		h.kv = kv
		return nil
	}
}

// NewHTTP returns an HTTP fence. The error matches ErrInvalidArgument for
// a nil option value.
func NewHTTP(opts ...HTTPOption) (*HTTP, error) {
	h := &HTTP{
		resource: func(*http.Request) string { return DefaultResource },
		states:   map[string]*resourceState{},
	}
	for _, o := range opts {
		if err := o(h); err != nil {
			return nil, err
		}
	}
	return h, nil
}

// state returns the fence of resource, made on first use.
func (h *HTTP) state(resource string) *resourceState {
	h.mu.Lock()
	defer h.mu.Unlock()
	st, ok := h.states[resource]
	if !ok {
		st = &resourceState{lock: make(chan struct{}, 1)}
		h.states[resource] = st
	}
	return st
}

// Seed raises the highest token accepted for resource to token, if it is
// lower: for a service that saved its highest tokens, or reads them from
// where its work lands, before it serves. It waits for a request of the
// resource being handled.
func (h *HTTP) Seed(resource string, token uint64) {
	st := h.state(resource)
	st.lock <- struct{}{}
	defer func() { <-st.lock }()
	if token > st.highest.Load() {
		st.highest.Store(token)
	}
}

// Highest returns the highest token accepted for resource, 0 for none.
func (h *HTTP) Highest(resource string) uint64 {
	return h.state(resource).highest.Load()
}

// Handler wraps next: a request runs next only if its token is at least
// the highest accepted for its resource, under the resource's lock (see
// HTTP).
func (h *HTTP) Handler(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		token, err := requestToken(r)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		resource := h.resource(r)
		if resource == "" {
			http.Error(w, "fence: no resource for this request (the fence's resource function returned none)", http.StatusBadRequest)
			return
		}
		st := h.state(resource)
		select {
		case st.lock <- struct{}{}:
		case <-r.Context().Done():
			http.Error(w, fmt.Sprintf("fence: the request ended while waiting for resource %q: %v", resource, context.Cause(r.Context())), http.StatusServiceUnavailable)
			return
		}
		defer func() { <-st.lock }()
		if highest := st.highest.Load(); token < highest {
			http.Error(w, (&StaleError{Resource: resource, Token: token, Highest: highest}).Error(), http.StatusConflict)
			return
		}
		if h.kv != nil {
			_, err := h.kv.Put(r.Context(), resource, token, nil)
			var stale *StaleError
			switch {
			case errors.As(err, &stale):
				st.highest.Store(max(st.highest.Load(), stale.Highest))
				http.Error(w, err.Error(), http.StatusConflict)
				return
			case errors.Is(err, ErrInvalidArgument):
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			case err != nil:
				http.Error(w, err.Error(), http.StatusServiceUnavailable)
				return
			}
		}
		st.highest.Store(token)
		next.ServeHTTP(w, r)
	})
}

// requestToken returns the token of the request's Fencing-Token header, or
// an error naming the header and what a token may be.
func requestToken(r *http.Request) (uint64, error) {
	vs := r.Header.Values(election.TokenHeader)
	switch len(vs) {
	case 0:
		return 0, fmt.Errorf("fence: missing %s header: send the leader's fencing token, %s", election.TokenHeader, tokenRule)
	case 1:
	default:
		return 0, fmt.Errorf("fence: %d %s headers %q: send exactly one, %s", len(vs), election.TokenHeader, vs, tokenRule)
	}
	token, err := ParseToken(vs[0])
	if err != nil {
		return 0, fmt.Errorf("fence: malformed %s header: %w", election.TokenHeader, err)
	}
	return token, nil
}
