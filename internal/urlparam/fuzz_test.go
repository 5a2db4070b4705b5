package urlparam

import (
	"net/url"
	"strings"
	"testing"
	"time"
)

// FuzzParams reads an arbitrary query with every getter: it never panics,
// a getter returns its default when the parameter is absent, a value it
// returns is in range, and Err names every parameter nobody read.
func FuzzParams(f *testing.F) {
	for _, q := range []string{
		"", "concurrency=8", "lease=5s&bogus=1", "a=1&a=2", "max_attempts=-1", "lease=soon",
		"x=%zz", "enabled=true&mode=fast", "n=99999999999999999999", "d=1h&d2=-1ns", "=&&=&",
	} {
		f.Add(q)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		q, err := url.ParseQuery(raw)
		if err != nil {
			return
		}
		p := New(q)
		if n := p.Int("n", 7, 1, 100); n < 1 || n > 100 {
			t.Fatalf("Int out of range: %d", n)
		}
		if d := p.Duration("d", time.Second, 0, time.Hour); d < 0 || d > time.Hour {
			t.Fatalf("Duration out of range: %s", d)
		}
		_ = p.Bool("enabled", false)
		if m := p.Enum("mode", "slow", "slow", "fast"); m != "slow" && m != "fast" {
			t.Fatalf("Enum returned %q", m)
		}
		s := p.String("s", "def")
		if _, ok := q["s"]; !ok && s != "def" {
			t.Fatalf("String without the parameter returned %q", s)
		}
		err = p.Err()
		for k := range q {
			switch k {
			case "n", "d", "enabled", "mode", "s":
				continue
			}
			if err == nil || !strings.Contains(err.Error(), k) {
				t.Fatalf("unknown parameter %q not reported: %v", k, err)
			}
		}
	})
}
