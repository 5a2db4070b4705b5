// Package pipeurl reads the receive pipeline's URL query parameters into a
// receiver.Config, for every transport's URL parser. It is internal so that
// no exported method takes the internal urlparam type.
package pipeurl

import (
	"time"

	"github.com/berth-go/berth/internal/urlparam"
	"github.com/berth-go/berth/receiver"
)

// Parse sets c's fields named by URL query parameters (concurrency,
// buffer, max_attempts, retry_delay, max_retry_delay, drain_timeout,
// close_grace, wave_cap, empty_delay, max_queue, restart_queue,
// check_interval, contact_interval, ordered_nack, retry_in_place). Problems are recorded in p.
func Parse(p *urlparam.Params, c *receiver.Config) {
	const maxInt = 1 << 30
	c.Concurrency = p.Int("concurrency", c.Concurrency, 1, 1<<20)
	c.BufferSize = p.Int("buffer", c.BufferSize, 1, 1<<24)
	c.MaxAttempts = p.Int("max_attempts", c.MaxAttempts, -1, maxInt)
	c.RetryDelay = p.Duration("retry_delay", c.RetryDelay, -1, 24*time.Hour)
	c.MaxRetryDelay = p.Duration("max_retry_delay", c.MaxRetryDelay, 0, 24*time.Hour)
	c.DrainTimeout = p.Duration("drain_timeout", c.DrainTimeout, 0, time.Hour)
	c.CloseGrace = p.Duration("close_grace", c.CloseGrace, 0, time.Hour)
	c.WaveCap = p.Int("wave_cap", c.WaveCap, 1, 1<<16)
	c.EmptyDelay = p.Duration("empty_delay", c.EmptyDelay, -1, time.Hour)
	c.MaxQueue = p.Int("max_queue", c.MaxQueue, 1, maxInt)
	c.RestartQueue = p.Int("restart_queue", c.RestartQueue, 0, maxInt)
	c.CheckInterval = p.Duration("check_interval", c.CheckInterval, time.Millisecond, time.Hour)
	c.ContactInterval = p.Duration("contact_interval", c.ContactInterval, -time.Hour, time.Hour)
	c.OrderedNack = receiver.OrderedNack(p.Enum("ordered_nack", string(c.OrderedNack),
		string(receiver.OrderedNackBlock), string(receiver.OrderedNackDeadLetter)))
	c.RetryInPlace = receiver.RetryInPlace(p.Enum("retry_in_place", string(c.RetryInPlace),
		string(receiver.RetryInPlaceAuto), string(receiver.RetryInPlaceOff)))
}
