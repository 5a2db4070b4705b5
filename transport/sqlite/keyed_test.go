package sqlite_test

import (
	"testing"

	"github.com/berth-go/berth/transport/transporttest"
)

// TestConformanceKeyed runs Watermill's suite with an ordering key on every
// message and order per key declared as guaranteed (across the ten
// subscribers of one consumer group in TestPublishSubscribeInOrder).
func TestConformanceKeyed(t *testing.T) {
	transporttest.RunWatermillKeyed(t, kit(t))
}
