package orderingtest

import (
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/berth-go/berth/transport"
)

// Handle is one handler of a ledger run: it records every message of ch in
// l as handled by instance, works up to maxWork (random), and nacks about
// one message in ten on its first two attempts. Once killed is closed the
// instance handles nothing more and never settles what it holds: Handle
// then waits for dead (closed at the test's cleanup) and returns.
func Handle(ch <-chan *message.Message, l *Ledger, instance int, maxWork time.Duration, killed, dead <-chan struct{}) {
	rnd := rand.New(rand.NewPCG(uint64(instance), rand.Uint64()))
	for m := range ch {
		select {
		case <-killed:
			<-dead // a killed instance handles nothing more
			return
		default:
		}
		end := l.Start(m.UUID, instance)
		if d := rnd.Int64N(int64(maxWork) + 1); d > 0 {
			time.Sleep(time.Duration(d)) // the handler's work
		}
		attempt, _ := strconv.Atoi(m.Metadata.Get(transport.MetadataAttempt))
		ok := attempt > 2 || rnd.IntN(10) > 0
		select {
		case <-killed:
			end(ok, false)
			<-dead // killed mid-handler: it never acks
			return
		default:
		}
		end(ok, true)
		if ok {
			m.Ack()
		} else {
			m.Nack()
		}
	}
}
