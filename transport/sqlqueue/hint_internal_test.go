package sqlqueue

import "testing"

// The hint learns how many rows a notification stood for and asks for
// twice that, so a claim sized by it comes back short when the flow holds.
func TestHintEstimate(t *testing.T) {
	var h hintEstimate
	if got := h.take(1); got != 1 {
		t.Fatalf("first hint = %d, want 1 (nothing learnt yet: one per notification)", got)
	}
	h.claimed(4) // the wake-up of one notification found 4 rows
	if got := h.take(1); got != 8 {
		t.Fatalf("hint after 4 rows per notification = %d, want 8", got)
	}
	h.claimed(4)
	if got := h.take(2); got != 16 {
		t.Fatalf("hint for 2 notifications at 4 rows each = %d, want 16", got)
	}
	// A wake-up that found nothing pulls the estimate down gradually.
	if got := h.take(1); got != 6 {
		t.Fatalf("hint after an empty wake-up = %d, want 6 (4 → 3 rows per notification)", got)
	}
	if got := h.take(0); got != 0 {
		t.Fatalf("hint without notifications = %d, want 0", got)
	}
	// Never below one row per notification.
	var low hintEstimate
	low.take(10)
	if got := low.take(3); got != 3 {
		t.Fatalf("hint after 0 rows for 10 notifications = %d, want 3", got)
	}
}
