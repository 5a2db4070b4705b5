package sqlqueuetest

import (
	"errors"
	"net/url"
	"slices"
	"strings"
	"testing"

	"github.com/berth-go/berth/transport"
)

// FuzzPassword is the password FuzzURL writes into every URL it tries; no
// error may repeat it.
const FuzzPassword = "fuzz-Pw-5e1c9a"

// URLFuzz tells FuzzURL how to turn fuzz inputs into a dialect's URLs and
// what to call with them.
type URLFuzz struct {
	// Seeds are the seed corpus.
	Seeds []string
	// URL turns one input into a URL of the dialect, or reports false to
	// skip the input. Required.
	URL func(input string) (*url.URL, bool)
	// Calls are the functions under test, by name: each gets a copy of the
	// URL (with FuzzPassword as its password) and closes whatever it opened.
	// Required.
	Calls map[string]func(u *url.URL) error
}

// FuzzURL fuzzes a dialect's URL handling: for every input, each of z.Calls
// must not panic, and every error it returns must wrap
// transport.ErrInvalidConfig and must not contain the URL's password.
// Inputs that hold FuzzPassword themselves skip the password check.
func FuzzURL(f *testing.F, z URLFuzz) {
	if z.URL == nil || len(z.Calls) == 0 {
		f.Fatal("sqlqueuetest: URLFuzz.URL and URLFuzz.Calls are required")
	}
	for _, s := range z.Seeds {
		f.Add(s)
	}
	names := make([]string, 0, len(z.Calls))
	for name := range z.Calls {
		names = append(names, name)
	}
	slices.Sort(names)
	f.Fuzz(func(t *testing.T, input string) {
		u, ok := z.URL(input)
		if !ok {
			return
		}
		u.User = url.UserPassword(u.User.Username(), FuzzPassword)
		checkSecret := !strings.Contains(input, FuzzPassword)
		for _, name := range names {
			c := *u
			err := z.Calls[name](&c)
			switch {
			case err == nil:
			case !errors.Is(err, transport.ErrInvalidConfig):
				t.Fatalf("%s(%s): %v is not ErrInvalidConfig", name, u.Redacted(), err)
			case checkSecret && strings.Contains(err.Error(), FuzzPassword):
				t.Fatalf("%s(%s): the error repeats the password: %v", name, u.Redacted(), err)
			}
		}
	})
}
