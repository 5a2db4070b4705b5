package mem_test

import (
	"strings"
	"testing"

	"github.com/berth-go/berth/transport/transporttest"
)

// TestConformanceKeyed runs Watermill's suite with an ordering key on every
// message and order per key declared as guaranteed, at concurrency 8
// rather than the plain suite's 1: the keys, not a single permit, keep
// the order.
func TestConformanceKeyed(t *testing.T) {
	transporttest.RunWatermillKeyed(t, configURL(t, strings.Replace(suiteURL, "concurrency=1", "concurrency=8", 1)))
}
