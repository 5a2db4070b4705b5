package inspect

import (
	"context"
	"strings"
	"time"
)

// QueueStats counts one queue's messages by state.
type QueueStats struct {
	Queue string // table or queue name
	Topic string // "" when unknown
	Group string // consumer group; "" for the default queue
	// Ready counts messages that can be received now.
	Ready int64
	// Delayed counts messages not yet due (delay or retry backoff).
	Delayed int64
	// InFlight counts messages received and not yet settled (SQL: fetched
	// plus processing rows; SQS: ApproximateNumberOfMessagesNotVisible).
	InFlight int64
	// ReadyMore, DelayedMore and InFlightMore are true when that count
	// stopped at the cap SQL.QueuesUpTo was given: the queue has more.
	ReadyMore, DelayedMore, InFlightMore bool `json:",omitempty"`
	// DeadLettered counts the queue's dead letters (SQL: rows of the error
	// table; SQS: messages in its dead-letter queue, which several queues
	// may share).
	DeadLettered int64
	// DeadLetteredMore is true when DeadLettered stopped counting at
	// DeadCountCap (SQL on PostgreSQL and SQLite): the queue has more.
	DeadLetteredMore bool `json:",omitempty"`
	// DeadLetterQueue names the SQS dead-letter queue counted in
	// DeadLettered; "" for SQL.
	DeadLetterQueue string
	// OldestReady is how long the oldest ready message has been due (SQL
	// only; 0 when none is ready, or for SQS).
	OldestReady time.Duration
	// Missing is true when the queue is known (subscribed, or has dead
	// letters) but its table or queue does not exist.
	Missing bool
	// Paused is true when the queue is paused fleet-wide (SQL: a row of
	// the paused table; see SQL.Pause); PausedBy says who or why.
	Paused   bool   `json:",omitempty"`
	PausedBy string `json:",omitempty"`
	// Parked is true for a topic's default queue that no default reader
	// subscribed to (SQL): its messages, published while the topic had no
	// subscription, wait there for consumer groups registered later (see
	// package sqlqueue, Consumer groups).
	Parked bool `json:",omitempty"`
}

// DeadLetter is one dead-lettered message.
type DeadLetter struct {
	ID       string            // error table id (SQL) or SQS message id
	Queue    string            // the queue it came from
	UUID     string            // Watermill message UUID
	Metadata map[string]string // Watermill metadata
	Payload  []byte
	Attempts int
	Reason   string
	FailedAt time.Time // when it was dead-lettered
}

// Filter selects dead letters. The zero value selects all.
type Filter struct {
	// Queue is a queue table name or topic (SQL) or a source queue name
	// (SQS); "" matches any.
	Queue string
	// Reason matches reasons containing it (case-insensitive).
	Reason string
	// OlderThan, when positive, matches dead letters failed longer ago.
	OlderThan time.Duration
	// NewerThan, when positive, matches dead letters failed more recently.
	NewerThan time.Duration
	// Since, when not zero, matches dead letters failed at or after it.
	Since time.Time
	// Until, when not zero, matches dead letters failed before it.
	Until time.Time
	// IDs, when not empty, matches only these ids.
	IDs []string
}

// Match reports whether d passes f at time now. queueAliases are other
// names of d's queue (its topic) that f.Queue may use.
func (f Filter) Match(d DeadLetter, now time.Time, queueAliases ...string) bool {
	if f.Queue != "" && f.Queue != d.Queue {
		ok := false
		for _, a := range queueAliases {
			if a != "" && a == f.Queue {
				ok = true
			}
		}
		if !ok {
			return false
		}
	}
	if f.Reason != "" && !strings.Contains(strings.ToLower(d.Reason), strings.ToLower(f.Reason)) {
		return false
	}
	age := now.Sub(d.FailedAt)
	if f.OlderThan > 0 && age < f.OlderThan {
		return false
	}
	if f.NewerThan > 0 && age > f.NewerThan {
		return false
	}
	if !f.Since.IsZero() && d.FailedAt.Before(f.Since) {
		return false
	}
	if !f.Until.IsZero() && !d.FailedAt.Before(f.Until) {
		return false
	}
	if len(f.IDs) > 0 {
		found := false
		for _, id := range f.IDs {
			if id == d.ID {
				found = true
			}
		}
		return found
	}
	return true
}

// Inspector is what both SQL and SQS deployments offer the tools.
type Inspector interface {
	// Queues returns every known queue's counts, by name.
	Queues(ctx context.Context) ([]QueueStats, error)
	// DeadLetters returns the dead letters f selects, oldest first, at
	// most limit (all when limit ≤ 0).
	DeadLetters(ctx context.Context, f Filter, limit int) ([]DeadLetter, error)
	// Replay moves the dead letters f selects back to their queues, with
	// attempts starting again; with dryRun it only returns them.
	Replay(ctx context.Context, f Filter, dryRun bool) ([]DeadLetter, error)
	// Purge deletes the dead letters f selects; with dryRun it only
	// returns them.
	Purge(ctx context.Context, f Filter, dryRun bool) ([]DeadLetter, error)
	// Close releases the connection.
	Close() error
}
