package console

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/berth-go/berth/internal/inspect"
)

// errBadInput marks a request the console refuses with 400.
var errBadInput = errors.New("bad request")

func badInput(format string, args ...any) error {
	return fmt.Errorf("%w: %s", errBadInput, fmt.Sprintf(format, args...))
}

// timeLayouts are the accepted forms of since and until: RFC 3339, and the
// value of an HTML datetime-local input (read as UTC).
var timeLayouts = []string{time.RFC3339Nano, "2006-01-02T15:04:05", "2006-01-02T15:04", "2006-01-02"}

func parseTime(key, v string) (time.Time, error) {
	for _, l := range timeLayouts {
		if t, err := time.Parse(l, v); err == nil {
			return t, nil
		}
	}
	return time.Time{}, badInput("%s=%q is not a time such as 2026-03-01T12:00:00Z or 2026-03-01T12:00", key, v)
}

// filterKeys are the query parameters parseFilter reads.
var filterKeys = []string{"queue", "reason", "since", "until", "older_than", "newer_than"}

// parseFilter reads a dead-letter filter from query parameters: queue,
// reason, since, until (times), older_than, newer_than (durations).
func parseFilter(q url.Values) (inspect.Filter, error) {
	var f inspect.Filter
	var errs []error
	f.Queue = strings.TrimSpace(q.Get("queue"))
	f.Reason = strings.TrimSpace(q.Get("reason"))
	if err := checkName("queue", f.Queue); err != nil {
		errs = append(errs, err)
	}
	if err := checkText("reason", f.Reason); err != nil {
		errs = append(errs, err)
	}
	if len(f.Reason) > 200 {
		errs = append(errs, badInput("reason is longer than 200 characters"))
	}
	for _, k := range []string{"since", "until"} {
		v := strings.TrimSpace(q.Get(k))
		if v == "" {
			continue
		}
		t, err := parseTime(k, v)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if k == "since" {
			f.Since = t
		} else {
			f.Until = t
		}
	}
	for _, k := range []string{"older_than", "newer_than"} {
		v := strings.TrimSpace(q.Get(k))
		if v == "" {
			continue
		}
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 {
			errs = append(errs, badInput("%s=%q is not a duration such as 1h or 30m", k, v))
			continue
		}
		if k == "older_than" {
			f.OlderThan = d
		} else {
			f.NewerThan = d
		}
	}
	if !f.Since.IsZero() && !f.Until.IsZero() && !f.Since.Before(f.Until) {
		errs = append(errs, badInput("since must be before until"))
	}
	if len(errs) > 0 {
		return f, errors.Join(errs...)
	}
	return f, nil
}

// filterQuery is f's query parameters as parseFilter reads them.
func filterQuery(q url.Values) url.Values {
	out := url.Values{}
	for _, k := range filterKeys {
		if v := strings.TrimSpace(q.Get(k)); v != "" {
			out.Set(k, v)
		}
	}
	return out
}

// checkText refuses a value no database column can hold as text: invalid
// UTF-8 or a NUL byte (PostgreSQL: SQLSTATE 22021), naming field.
func checkText(field, v string) error {
	switch {
	case !utf8.ValidString(v):
		return badInput("%s is not valid UTF-8", field)
	case strings.ContainsRune(v, 0):
		return badInput("%s contains a NUL byte", field)
	}
	return nil
}

// checkName is checkText for a queue or topic name, which also has no
// control characters.
func checkName(field, v string) error {
	if err := checkText(field, v); err != nil {
		return err
	}
	if i := strings.IndexFunc(v, unicode.IsControl); i >= 0 {
		return badInput("%s contains a control character", field)
	}
	return nil
}

// decodeJSON reads one JSON value of the type of v from r's body (at most
// limit bytes; no unknown fields, nothing after it). An empty body is
// io.EOF, for the caller to accept or not.
func decodeJSON(w http.ResponseWriter, r *http.Request, limit int64, v any) error {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, limit))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return errors.New("more after the JSON value")
	}
	return nil
}

// parseIDs reads dead-letter ids: at most 1000, each non-empty and at
// most 200 characters.
func parseIDs(ids []string) ([]string, error) {
	var out []string
	for _, id := range ids {
		id = strings.TrimSpace(id)
		if id == "" {
			continue
		}
		if len(id) > 200 || checkName("id", id) != nil {
			return nil, badInput("id %.20q… is not a dead-letter id", id)
		}
		out = append(out, id)
	}
	if len(out) > 1000 {
		return nil, badInput("at most 1000 ids at once, got %d", len(out))
	}
	return out, nil
}

// parseDelay reads a replay delay ("" is none).
func parseDelay(v string) (time.Duration, error) {
	v = strings.TrimSpace(v)
	if v == "" || v == "0" {
		return 0, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 || d > 7*24*time.Hour {
		return 0, badInput("delay=%q is not a duration from 0 to 168h, such as 5m", v)
	}
	return d, nil
}
