// Package urlparam reads typed configuration from URL query parameters and
// reports every problem at once, naming the parameter and what it accepts.
package urlparam

import (
	"errors"
	"fmt"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Params reads a URL's query. Use its getters, then Err: Err also reports
// every parameter that no getter asked for. A parameter may be read more
// than once (by a publisher's and a subscriber's parser over one URL): each
// distinct problem is reported once.
type Params struct {
	q    url.Values
	used map[string]bool
	errs []error
}

// New returns Params over q.
func New(q url.Values) *Params { return &Params{q: q, used: map[string]bool{}} }

func (p *Params) get(name string) (string, bool) {
	p.used[name] = true
	vs, ok := p.q[name]
	if !ok || len(vs) == 0 {
		return "", false
	}
	if len(vs) > 1 {
		p.errs = append(p.errs, fmt.Errorf("parameter %q: given %d times, want once", name, len(vs)))
	}
	return vs[len(vs)-1], true
}

// Has reports whether name is present (and marks it used).
func (p *Params) Has(name string) bool { _, ok := p.get(name); return ok }

// String returns the value of name, or def.
func (p *Params) String(name, def string) string {
	if v, ok := p.get(name); ok {
		return v
	}
	return def
}

// Int returns name as an integer in [lo, hi], or def.
func (p *Params) Int(name string, def, lo, hi int) int {
	v, ok := p.get(name)
	if !ok {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < lo || n > hi {
		p.errs = append(p.errs, fmt.Errorf("parameter %q: %q is not an integer from %d to %d", name, v, lo, hi))
		return def
	}
	return n
}

// Duration returns name as a Go duration ("250ms", "5s") in [lo, hi], or def.
func (p *Params) Duration(name string, def, lo, hi time.Duration) time.Duration {
	v, ok := p.get(name)
	if !ok {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < lo || d > hi {
		p.errs = append(p.errs, fmt.Errorf("parameter %q: %q is not a duration from %s to %s (e.g. 250ms, 5s)", name, v, lo, hi))
		return def
	}
	return d
}

// Bool returns name as true/false/1/0, or def.
func (p *Params) Bool(name string, def bool) bool {
	v, ok := p.get(name)
	if !ok {
		return def
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		p.errs = append(p.errs, fmt.Errorf("parameter %q: %q is not one of true, false", name, v))
		return def
	}
	return b
}

// Enum returns name if it is one of accepted, or def.
func (p *Params) Enum(name, def string, accepted ...string) string {
	v, ok := p.get(name)
	if !ok {
		return def
	}
	if !slices.Contains(accepted, v) {
		p.errs = append(p.errs, fmt.Errorf("parameter %q: %q is not one of %s", name, v, strings.Join(accepted, ", ")))
		return def
	}
	return v
}

// Fail records a problem with name that the caller found itself.
func (p *Params) Fail(name, format string, args ...any) {
	p.errs = append(p.errs, fmt.Errorf("parameter %q: %s", name, fmt.Sprintf(format, args...)))
}

// Err returns every problem found, including parameters nobody read, or nil.
// A problem found more than once (the same parameter read twice) is
// reported once.
func (p *Params) Err() error {
	var unknown []string
	for k := range p.q {
		if !p.used[k] {
			unknown = append(unknown, k)
		}
	}
	var errs []error
	seen := make(map[string]bool, len(p.errs))
	for _, err := range p.errs {
		if msg := err.Error(); !seen[msg] {
			seen[msg] = true
			errs = append(errs, err)
		}
	}
	if len(unknown) > 0 {
		sort.Strings(unknown)
		known := make([]string, 0, len(p.used))
		for k := range p.used {
			known = append(known, k)
		}
		sort.Strings(known)
		errs = append(errs, fmt.Errorf("unknown parameter(s) %s; accepted: %s", strings.Join(unknown, ", "), strings.Join(known, ", ")))
	}
	return errors.Join(errs...)
}
