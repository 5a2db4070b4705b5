package textcut_test

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/berth-go/berth/internal/textcut"
)

func TestCut(t *testing.T) {
	if got := textcut.Cut("short", 10); got != "short" {
		t.Fatalf("a text within the budget = %q", got)
	}
	for n := 3; n < 40; n++ {
		got := textcut.Cut(strings.Repeat("é€x", 10), n)
		if len(got) > n || !utf8.ValidString(got) || !strings.HasSuffix(got, "…") {
			t.Fatalf("Cut(_, %d) = %q (%d bytes, valid %v)", n, got, len(got), utf8.ValidString(got))
		}
	}
}
