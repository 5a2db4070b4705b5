package main

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/berth-go/berth/internal/inspect"
)

// groupsURL takes the URL from the first positional argument when it has a
// scheme (berth groups postgres://… orders), else from --url or
// $BERTH_URL, and returns the other positional arguments.
func groupsURL(flagURL string, pos []string) (string, []string) {
	if len(pos) > 0 && strings.Contains(pos[0], "://") {
		return pos[0], pos[1:]
	}
	return flagURL, pos
}

func groupsCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 && args[0] == "retire" {
		return groupsRetire(ctx, args[1:], stdout, stderr)
	}
	fs := newFlags("berth groups", "berth groups [--url] URL [TOPIC] [--json]\n       berth groups retire [--url] URL TOPIC GROUP [--force] [--grace D]", `
Lists the consumer groups of every topic (or of TOPIC) of a SQL deployment:
the subscriptions publishers fan out to, each with its queue table, its
ready, delayed and in-flight counts, the age of its oldest message and its
last reader. A group nobody reads any more keeps growing: retire it with
berth groups retire (see its --help).

LAST READER is the most recent of: the latest report of a listener of the
group in the fleet's listeners table (subscribers started with
fleet_interval; "live" when one reported within three of its intervals),
the latest lease end of a message in flight ("lease": a reader received it
less than one lease before) and the latest dead letter of the queue. It is
"never" when the queue still holds every message it ever received, none
ever attempted, and "unknown" when there is no evidence either way (a
reader without fleet reporting leaves none once it has settled
everything). The line under the table says what the times are based on.`, stderr)
	u := fs.String("url", envURL(), "SQL transport URL (postgres://, sqlite://, sqlserver://); default $BERTH_URL")
	asJSON := fs.Bool("json", false, "print JSON")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	url, pos := groupsURL(*u, pos)
	if len(pos) > 1 {
		return usagef("unexpected argument %q", pos[1])
	}
	topic := ""
	if len(pos) == 1 {
		topic = pos[0]
	}
	if err := requireURL(url); err != nil {
		return err
	}
	s, err := openGroupsSQL(ctx, url)
	if err != nil {
		return err
	}
	defer s.Close()
	list, err := s.Groups(ctx, topic)
	if err != nil {
		return err
	}
	if *asJSON {
		if list.Groups == nil {
			list.Groups = []inspect.Group{}
		}
		return writeJSON(stdout, list)
	}
	if len(list.Groups) == 0 {
		if topic != "" {
			fmt.Fprintf(stdout, "no consumer groups of topic %s\n", topic)
		} else {
			fmt.Fprintln(stdout, "no consumer groups")
		}
		return nil
	}
	printGroups(stdout, list, time.Now())
	return nil
}

// openGroupsSQL opens a SQL deployment for berth groups.
func openGroupsSQL(ctx context.Context, url string) (*inspect.SQL, error) {
	in, err := inspect.Open(ctx, url)
	if err != nil {
		return nil, err
	}
	s, ok := in.(*inspect.SQL)
	if !ok {
		_ = in.Close()
		return nil, fmt.Errorf("groups works on SQL transports only (SQS: a consumer group is a queue subscribed to the topic; list and delete it with the AWS tools)")
	}
	return s, nil
}

func printGroups(w io.Writer, list inspect.GroupList, now time.Time) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "TOPIC\tGROUP\tQUEUE\tREADY\tDELAYED\tIN FLIGHT\tOLDEST\tLAST READER")
	for _, g := range list.Groups {
		group := g.Group
		if group == "" {
			group = "(default reader)"
		}
		queue := g.Queue
		if g.Missing {
			queue += " (missing)"
		}
		if g.Stray {
			queue += " (stray)"
		}
		oldest := "-"
		if g.OldestAge > 0 {
			oldest = age(g.OldestAge)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", g.Topic, group, queue,
			upTo(g.Ready, g.ReadyMore), upTo(g.Delayed, g.DelayedMore), upTo(g.InFlight, g.InFlightMore), oldest, lastReader(g.LastReader, now))
	}
	_ = tw.Flush()
	if list.Reporting > 0 {
		fmt.Fprintf(w, "\nlast reader: fleet reports (%d listener(s) report to the fleet table), else the latest lease or dead letter of the queue\n", list.Reporting)
	} else {
		fmt.Fprintln(w, "\nlast reader: no subscriber reports to the fleet table (start them with fleet_interval for live answers): the latest lease or dead letter of the queue, if any")
	}
}

// lastReader renders r: "live, 2s ago (fleet host/1/ab)", "3h ago (lease)",
// "never", "unknown".
func lastReader(r inspect.LastReader, now time.Time) string {
	switch r.Basis {
	case inspect.ReadNever, inspect.ReadUnknown, "":
		if r.Basis == "" {
			return inspect.ReadUnknown
		}
		return r.Basis
	}
	s := age(now.Sub(r.At)) + " ago (" + r.Basis
	if r.Instance != "" {
		s += " " + r.Instance
	}
	s += ")"
	if r.Live {
		s = "live, " + s
	}
	return s
}

// age renders d coarsely: 45s, 12m, 5h, 3d.
func age(d time.Duration) string {
	switch {
	case d < time.Minute:
		return strconv.Itoa(int(max(d, 0)/time.Second)) + "s"
	case d < time.Hour:
		return strconv.Itoa(int(d/time.Minute)) + "m"
	case d < 48*time.Hour:
		return strconv.Itoa(int(d/time.Hour)) + "h"
	}
	return strconv.Itoa(int(d/(24*time.Hour))) + "d"
}

func groupsRetire(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("berth groups retire", "berth groups retire [--url] URL TOPIC GROUP [--force] [--grace D] [--json]", `
Retires consumer group GROUP of TOPIC: unregisters it, so that publishers
stop fanning out to it, and drops its queue table. Without --force it
refuses, changing nothing, while the queue holds messages (it says how
many) or while a listener of the group reported to the fleet table within
three of its intervals. Running it again is harmless: a retired group is
reported as such, and a retire that was interrupted is finished.

Publishers cache each topic's subscriptions for subscriptions_ttl (1s by
default), so retire waits --grace between unregistering and dropping the
table: set it above the longest subscriptions_ttl of your publishers (a
publisher that still inserts into a dropped table makes it again). Messages
published during the grace are dropped with --force; without it the table
is kept and retire says how many arrived.

Retire cannot stop what still runs: a subscriber of the group registers it
again at its next claim (stop them first), and a publisher declaring the
group (groups=TOPIC:GROUP) registers it again when it restarts (remove it
from its URL). The group's dead letters stay (berth dlq purge --queue
QUEUE). If TOPIC has no subscription left, its further messages are
parked in its default queue for groups registered later.`, stderr)
	u := fs.String("url", envURL(), "SQL transport URL (postgres://, sqlite://, sqlserver://); default $BERTH_URL")
	force := fs.Bool("force", false, "retire even with messages (dropped) or a live reader")
	grace := fs.Duration("grace", inspect.DefaultRetireGrace, "wait this long between unregistering and dropping the table (0: drop at once)")
	asJSON := fs.Bool("json", false, "print JSON")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	url, pos := groupsURL(*u, pos)
	if len(pos) != 2 {
		return usagef("needs TOPIC and GROUP, got %d argument(s)", len(pos))
	}
	topic, group := pos[0], pos[1]
	if group == "" {
		return usagef("GROUP is empty: the default reader is no consumer group")
	}
	if *grace < 0 {
		return usagef("--grace must be ≥ 0, got %s", *grace)
	}
	if err := requireURL(url); err != nil {
		return err
	}
	s, err := openGroupsSQL(ctx, url)
	if err != nil {
		return err
	}
	defer s.Close()
	o := inspect.RetireOptions{Force: *force, Grace: *grace}
	if o.Grace == 0 {
		o.Grace = -1 // at once
	}
	r, err := s.RetireGroup(ctx, topic, group, o)
	if *asJSON && err == nil {
		return writeJSON(stdout, r)
	}
	printRetired(stdout, r, err)
	return err
}

func printRetired(w io.Writer, r inspect.Retired, err error) {
	if r.Queue == "" {
		return
	}
	switch {
	case r.Unregistered:
		fmt.Fprintf(w, "unregistered group %s of topic %s: publishers stop fanning out to it once their cached subscriptions (subscriptions_ttl, 1s by default) expire; waited %s\n", r.Group, r.Topic, r.Waited)
	case err == nil && !r.Dropped:
		fmt.Fprintf(w, "group %s of topic %s is not registered and has no table: nothing to retire\n", r.Group, r.Topic)
	}
	if r.Dropped {
		fmt.Fprintf(w, "dropped %s (%d message(s))\n", r.Queue, r.DroppedMessages)
	}
	if err != nil {
		return
	}
	if r.DeadLetters > 0 {
		more := ""
		if r.DeadLettersMore {
			more = "+"
		}
		fmt.Fprintf(w, "%d%s dead letter(s) of %s remain: berth dlq purge --queue %s\n", r.DeadLetters, more, r.Queue, r.Queue)
	}
	if r.Parking && (r.Unregistered || r.Dropped) {
		fmt.Fprintf(w, "topic %s has no subscription left: its further messages are parked in its default queue\n", r.Topic)
	}
	if r.Reregistered {
		fmt.Fprintf(w, "warning: %s is registered again (a subscriber of the group still runs, or a publisher cached it for longer than --grace): stop it and retire again\n", r.Queue)
	}
}

// upTo formats a count that stopped at a cap when more is set ("10000+").
func upTo(n int64, more bool) string {
	s := strconv.FormatInt(n, 10)
	if more {
		s += "+"
	}
	return s
}
