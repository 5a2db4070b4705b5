package urlparam

import (
	"net/url"
	"strings"
	"testing"
	"time"
)

func parse(t *testing.T, q string) *Params {
	t.Helper()
	v, err := url.ParseQuery(q)
	if err != nil {
		t.Fatal(err)
	}
	return New(v)
}

func TestGettersAndDefaults(t *testing.T) {
	p := parse(t, "n=5&d=250ms&b=true&e=fifo&s=x")
	if got := p.Int("n", 1, 0, 10); got != 5 {
		t.Fatalf("Int = %d", got)
	}
	if got := p.Int("missing", 7, 0, 10); got != 7 {
		t.Fatalf("default Int = %d", got)
	}
	if got := p.Duration("d", 0, 0, time.Second); got != 250*time.Millisecond {
		t.Fatalf("Duration = %s", got)
	}
	if !p.Bool("b", false) || p.Enum("e", "std", "std", "fifo") != "fifo" || p.String("s", "") != "x" {
		t.Fatal("Bool/Enum/String")
	}
	if err := p.Err(); err != nil {
		t.Fatalf("Err = %v", err)
	}
}

func TestEveryProblemNamed(t *testing.T) {
	p := parse(t, "n=11&d=soon&b=maybe&e=x&typo=1&n2=1&n2=2")
	p.Int("n", 1, 0, 10)
	p.Duration("d", 0, 0, time.Second)
	p.Bool("b", false)
	p.Enum("e", "a", "a", "b")
	p.Int("n2", 0, 0, 10)
	err := p.Err()
	if err == nil {
		t.Fatal("no error")
	}
	for _, want := range []string{`"n"`, "0 to 10", `"d"`, "duration", `"b"`, "true, false", `"e"`, "a, b", "typo", "given 2 times", "accepted: b, d, e, n, n2"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
}

// A publisher's and a subscriber's parser may both read a parameter of one
// URL: each problem is reported once.
func TestReadTwiceReportsOnce(t *testing.T) {
	p := parse(t, "n=eleven&s=a&s=b")
	for range 2 {
		p.Int("n", 1, 0, 10)
		p.String("s", "")
	}
	err := p.Err()
	if err == nil {
		t.Fatal("no error")
	}
	for _, want := range []string{`parameter "n": "eleven"`, `parameter "s": given 2 times`} {
		if n := strings.Count(err.Error(), want); n != 1 {
			t.Errorf("%q reported %d times:\n%v", want, n, err)
		}
	}
}
