package receiver

import (
	"sync"

	"github.com/ThreeDotsLabs/watermill/message"
)

// An outbox is a listener's Watermill channel, shared by its stages (the
// current one and those a rebuild is still closing). A send never races
// the close: Close may return before every stage goroutine has exited (it
// gives up after its grace), and a send on a closed channel would panic.
type outbox struct {
	ch     chan *message.Message
	mu     sync.RWMutex
	closed bool
}

func newOutbox() *outbox { return &outbox{ch: make(chan *message.Message)} }

// send delivers msg unless stop is closed first or the outbox is closed; it
// reports whether msg was delivered. A sender blocks close only until stop
// is closed, which every stage's Close does first.
func (o *outbox) send(msg *message.Message, stop <-chan struct{}) bool {
	o.mu.RLock()
	defer o.mu.RUnlock()
	if o.closed {
		return false
	}
	select {
	case o.ch <- msg:
		return true
	case <-stop:
		return false
	}
}

// close closes the channel once no send is in progress.
func (o *outbox) close() {
	o.mu.Lock()
	defer o.mu.Unlock()
	if !o.closed {
		o.closed = true
		close(o.ch)
	}
}
