package sqsbench

import (
	"bytes"
	"io"
	"maps"
	"net/http"
	"strings"
	"sync"
	"time"
)

// Counter is an http.RoundTripper that counts the API requests going
// through it by operation, as AWS bills them: every HTTP request, retries
// included. It sits under the SDK, so it counts the same way for any
// library built on aws-sdk-go-v2, and it also tracks how many requests of
// each operation are in flight at once (outstanding long polls). The zero
// value counts through http.DefaultTransport; Counter is safe for
// concurrent use.
type Counter struct {
	// Next sends the requests. Defaults to http.DefaultTransport.
	Next http.RoundTripper

	// LongPoll, when set, is the long-poll wait of the ReceiveMessage
	// calls: an empty response that comes back more than a second before
	// it counts as an early empty receive (see EarlyEmpty). Defaults to 0
	// (not classified).
	LongPoll time.Duration

	mu         sync.Mutex
	counts     map[string]int64
	inFlight   map[string]int
	peak       map[string]int
	empty      int64
	earlyEmpty int64
}

// RoundTrip counts req under its operation and sends it.
func (c *Counter) RoundTrip(req *http.Request) (*http.Response, error) {
	op := Operation(req)
	c.mu.Lock()
	if c.counts == nil {
		c.counts, c.inFlight, c.peak = map[string]int64{}, map[string]int{}, map[string]int{}
	}
	c.counts[op]++
	c.inFlight[op]++
	c.peak[op] = max(c.peak[op], c.inFlight[op])
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		c.inFlight[op]--
		c.mu.Unlock()
	}()
	next := c.Next
	if next == nil {
		next = http.DefaultTransport
	}
	start := time.Now()
	res, err := next.RoundTrip(req)
	if err != nil || op != "ReceiveMessage" || res.StatusCode != http.StatusOK {
		return res, err
	}
	// Look into the response for messages.
	body, err := io.ReadAll(res.Body)
	_ = res.Body.Close()
	res.Body = io.NopCloser(bytes.NewReader(body))
	if err != nil {
		return res, nil // the SDK gets the short body and reports it
	}
	if !bytes.Contains(body, []byte(`"ReceiptHandle"`)) {
		c.mu.Lock()
		c.empty++
		if c.LongPoll > 0 && time.Since(start) < c.LongPoll-time.Second {
			c.earlyEmpty++
		}
		c.mu.Unlock()
	}
	return res, nil
}

// Empty returns how many ReceiveMessage calls came back without messages.
func (c *Counter) Empty() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.empty
}

// EarlyEmpty returns how many ReceiveMessage calls came back without
// messages before their long poll (LongPoll) was over. Amazon SQS answers a
// long poll when a message is available or the wait ends; the fauxqs
// emulator wakes every waiting poll when a message arrives and all but one
// come back empty at once. These responses are an emulator artefact that
// inflates the count of a consumer holding several polls open.
func (c *Counter) EarlyEmpty() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.earlyEmpty
}

// Operation names the API operation of an AWS JSON-protocol request (the
// part after the dot of X-Amz-Target, such as "ReceiveMessage"), or
// "other".
func Operation(req *http.Request) string {
	t := req.Header.Get("X-Amz-Target")
	if t == "" {
		return "other"
	}
	if i := strings.LastIndexByte(t, '.'); i >= 0 {
		return t[i+1:]
	}
	return t
}

// Counts returns a copy of the request counts by operation.
func (c *Counter) Counts() map[string]int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps.Clone(c.counts)
}

// Total returns the number of requests of all operations.
func (c *Counter) Total() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	var n int64
	for _, v := range c.counts {
		n += v
	}
	return n
}

// Peak returns the most requests of operation op that were in flight at
// once since the last Reset.
func (c *Counter) Peak(op string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.peak[op]
}

// Reset sets the counts (empty receives included) and peaks to zero; requests in flight stay in
// flight (and count toward the new peaks).
func (c *Counter) Reset() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.counts = map[string]int64{}
	c.empty, c.earlyEmpty = 0, 0
	c.peak = maps.Clone(c.inFlight)
	if c.peak == nil {
		c.inFlight, c.peak = map[string]int{}, map[string]int{}
	}
}
