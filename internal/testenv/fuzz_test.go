package testenv_test

import (
	"testing"

	"github.com/berth-go/berth/internal/testenv"
)

// FuzzUniqueName checks that any prefix yields a valid name.
func FuzzUniqueName(f *testing.F) {
	for _, p := range []string{"", "orders", "Orders-Queue.fifo", "9", "_", "ü", "a b\x00c"} {
		f.Add(p)
	}
	f.Fuzz(func(t *testing.T, prefix string) {
		n := testenv.UniqueName(prefix)
		if !namePattern.MatchString(n) || len(n) > testenv.MaxNameLen {
			t.Fatalf("UniqueName(%q) = %q", prefix, n)
		}
	})
}
