package main

import (
	"context"
	"flag"
	"io"
	"log/slog"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/berth-go/berth/internal/testenv"
)

// rounds is how many runs each database gets; issue 34's acceptance is
// 20 (go test ./watermill/orderedevents/ -rounds=20).
var rounds = flag.Int("rounds", 3, "runs per database, each with the routers started in another order (-short: 1)")

func TestMain(m *testing.M) {
	// The read models log every event at Info through slog's default.
	slog.SetDefault(slog.New(slog.NewTextHandler(io.Discard, nil)))
	goleak.VerifyTestMain(m, testenv.WatermillSuiteLeaks...)
}

// routerNames are the routers a round starts, each after its delay.
var routerNames = append([]string{"commands"}, eventGroups...)

// TestEveryEventInOrderPerSubscriber is what the example shows, on
// PostgreSQL and SQLite: both event groups handle every event, and each
// handles one subscriber's events in the order they were published, while
// the command handlers' router and each event group's start in every
// order, up to 2 s after the first command. A round's start order is the
// round's permutation of three delays drawn in [0, 2 s], so six rounds see
// every order. Without the ordering key, the groups handled some
// subscriber's events out of order on PostgreSQL in 2 of 3 rounds; without
// groups=, a group that started late missed events on both databases.
func TestEveryEventInOrderPerSubscriber(t *testing.T) {
	n := *rounds
	if testing.Short() {
		n = 1
	}
	for _, db := range testenv.SQLDatabases {
		t.Run(db, func(t *testing.T) {
			t.Parallel()
			perms := permutations(routerNames)
			first := rand.IntN(len(perms))
			reordered := 0
			for round := range n {
				starts := startsFor(perms[(first+round)%len(perms)])
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				began := time.Now()
				s, err := run(ctx, config{URL: testenv.SQLURL(t, db), Subscribers: 12, Interval: 20 * time.Millisecond, Starts: starts})
				cancel()
				if err != nil && s == nil {
					t.Fatalf("round %d: %v", round, err)
				}
				if err != nil {
					t.Fatalf("round %d (starts %v): %v; handled %v of %d events", round, starts, err, s.handledCounts(), s.want)
				}
				if checkRound(t, round, starts, s) {
					reordered++
				}
				t.Logf("round %d: starts %v, every event handled after %s", round, starts, time.Since(began).Round(time.Millisecond))
			}
			t.Logf("%d rounds; in %d the command handlers (a consumer group each) published some subscriber's events in another order than its commands", n, reordered)
		})
	}
}

// checkRound checks one round and reports whether the command handlers
// published some subscriber's events in another order than the commands
// were sent (they are three consumer groups, as in the original, so a
// backlog is handled by all three at once). The events' order is what the
// groups must keep, whatever it is.
func checkRound(t *testing.T, round int, starts map[string]time.Duration, s *seen) (reordered bool) {
	t.Helper()
	published := s.publishedEvents()
	if len(published) != s.want {
		t.Errorf("round %d (starts %v): %d events published, want %d", round, starts, len(published), s.want)
	}
	want := bySubscriber(published)
	for _, g := range eventGroups {
		got := bySubscriber(s.handledEvents(g))
		for sub, w := range want {
			if !slices.Equal(got[sub], w) {
				t.Errorf("round %d (starts %v): %s handled subscriber %s's events as %v, published as %v", round, starts, g, sub, got[sub], w)
			}
		}
		if len(got) != len(want) {
			t.Errorf("round %d: %s handled events of %d subscribers, want %d", round, g, len(got), len(want))
		}
	}

	// The example's own read models: the subscriber list is what the
	// events give in publish order, the timeline lists each subscriber's
	// activities in publish order.
	if !maps.Equal(s.subscribers.subscribers, s.replica.subscribers) {
		t.Errorf("round %d (starts %v): SubscriberReadModel is %v, the events in publish order give %v", round, starts, s.subscribers.subscribers, s.replica.subscribers)
	}
	activity := map[string]string{"SUBSCRIBED": "SubscriberSubscribed", "EMAIL_UPDATED": "SubscriberEmailUpdated", "UNSUBSCRIBED": "SubscriberUnsubscribed"}
	timeline := map[string][]string{}
	for _, a := range s.activity.activities {
		timeline[a.SubscriberID] = append(timeline[a.SubscriberID], activity[a.ActivityType])
	}
	if !maps.EqualFunc(timeline, want, slices.Equal) {
		t.Errorf("round %d (starts %v): the activity timeline per subscriber is %v, published %v", round, starts, timeline, want)
	}

	for _, names := range want {
		if !slices.IsSortedFunc(names, func(a, b string) int { return commandOrder[a] - commandOrder[b] }) {
			return true
		}
	}
	return false
}

// commandOrder is the order the traffic sends each subscriber's commands in.
var commandOrder = map[string]int{"SubscriberSubscribed": 0, "SubscriberEmailUpdated": 1, "SubscriberUnsubscribed": 2}

// startsFor gives names delays drawn in [0, 2 s], the shortest to the
// first name.
func startsFor(names []string) map[string]time.Duration {
	d := make([]time.Duration, len(names))
	for i := range d {
		d[i] = time.Duration(rand.Int64N(int64(2*time.Second) + 1))
	}
	slices.Sort(d)
	starts := map[string]time.Duration{}
	for i, name := range names {
		starts[name] = d[i]
	}
	return starts
}

// permutations returns every order of names.
func permutations(names []string) [][]string {
	if len(names) <= 1 {
		return [][]string{slices.Clone(names)}
	}
	var out [][]string
	for i := range names {
		rest := append(slices.Clone(names[:i]), names[i+1:]...)
		for _, p := range permutations(rest) {
			out = append(out, append([]string{names[i]}, p...))
		}
	}
	return out
}
