package sqlqueue

import (
	"math"
	"sync"
)

// Wake-up hints.
//
// A wake-up tells the receive loop how many notifications it coalesced
// (TakeWakeHint), and the loop answers with a wave of that size. But a
// notification does not announce one row: a publisher sends at most one
// NOTIFY per queue per notify window (PublisherConfig.NotifyWindow), so at
// a steady 200 msg/s one notification stands for about four rows, and a
// wave of one found one, doubled to two, doubled to four and came back
// short: three claims for what one could take (measured: 0.37 claims per
// message, 1.7 per notification).
//
// So the source learns how many rows a notification stood for: the rows
// its claims found between one wake-up and the next, per notification of
// the first (an exponentially weighted mean). It hints twice that many per
// notification, so that a claim sized by the hint usually comes back short
// (the rows announced, and room to spare): the short claim ends the wave
// without an empty claim after it. A burst larger than the estimate comes
// back full, and the wave doubles from there as before. Asking for more
// rows than are due costs a PostgreSQL or SQLite claim nothing; rows beyond
// the loop's free permits wait in the buffer, bounded as any wave's.

// hintWeight is the weight of the newest sample in the estimate.
const hintWeight = 0.25

// hintEstimate is a source's rows-per-notification estimate.
type hintEstimate struct {
	mu       sync.Mutex
	notified int     // the notifications of the last wake-up taken
	rows     int     // rows claimed since then
	perNote  float64 // rows per notification (0: no sample yet)
}

// claimed records rows found by a claim.
func (h *hintEstimate) claimed(rows int) {
	h.mu.Lock()
	h.rows += rows
	h.mu.Unlock()
}

// take closes the sample of the previous wake-up and returns the hint for
// one of n notifications.
func (h *hintEstimate) take(n int) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.notified > 0 {
		sample := float64(h.rows) / float64(h.notified)
		if h.perNote == 0 {
			h.perNote = sample
		} else {
			h.perNote += hintWeight * (sample - h.perNote)
		}
	}
	h.notified, h.rows = n, 0
	if n <= 0 {
		return 0
	}
	est := 2 * float64(n) * h.perNote
	if est >= math.MaxInt32 {
		return math.MaxInt32
	}
	return max(n, int(math.Ceil(est)))
}
