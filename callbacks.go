package election

import "sync"

// callbackQueue runs user callbacks one at a time, in order, on a goroutine of
// its own, so that a slow or blocking callback never delays a renewal.
type callbackQueue struct {
	mu      sync.Mutex
	pending []func()
	closed  bool
	wake    chan struct{} // buffered 1: "pending or closed changed"
	done    chan struct{} // closed when the goroutine has exited
}

func newCallbackQueue() *callbackQueue {
	q := &callbackQueue{wake: make(chan struct{}, 1), done: make(chan struct{})}
	go q.loop()
	return q
}

func (q *callbackQueue) push(f func()) {
	q.mu.Lock()
	q.pending = append(q.pending, f)
	q.mu.Unlock()
	q.signal()
}

// closeAndWait runs what is queued, then stops the goroutine and waits for it.
func (q *callbackQueue) closeAndWait() {
	q.mu.Lock()
	q.closed = true
	q.mu.Unlock()
	q.signal()
	<-q.done
}

func (q *callbackQueue) signal() {
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

func (q *callbackQueue) loop() {
	defer close(q.done)
	for {
		q.mu.Lock()
		if len(q.pending) == 0 {
			closed := q.closed
			q.mu.Unlock()
			if closed {
				return
			}
			<-q.wake
			continue
		}
		f := q.pending[0]
		q.pending = q.pending[1:]
		q.mu.Unlock()
		f()
	}
}
