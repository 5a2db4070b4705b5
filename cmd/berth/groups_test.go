package main

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/berth-go/berth/internal/inspect"
	"github.com/berth-go/berth/internal/testenv"
	"github.com/berth-go/berth/transport"
)

func groupsJSON(t *testing.T, args ...string) map[string]inspect.Group {
	t.Helper()
	out := mustRun(t, append([]string{"groups"}, append(args, "--json")...)...)
	var l inspect.GroupList
	if err := json.Unmarshal([]byte(out), &l); err != nil {
		t.Fatalf("groups --json: %v\n%s", err, out)
	}
	m := map[string]inspect.Group{}
	for _, g := range l.Groups {
		m[g.Topic+":"+g.Group] = g
	}
	return m
}

// berth groups lists each group with counts and last reader (table and
// JSON, URL as an argument or --url); berth groups retire refuses a group
// with messages (exit 1, saying how many, nothing changed), retires it with
// --force, after which a publisher that had it cached publishes nothing
// more to it; retiring again is harmless.
func TestGroupsCommand(t *testing.T) {
	for _, kind := range []string{"sqlite", "postgres"} {
		t.Run(kind, func(t *testing.T) {
			u := "sqlite://" + filepath.Join(t.TempDir(), "g.db")
			if kind == "postgres" {
				u = testenv.PostgresSchemaURL(t)
			}
			mustRun(t, "migrate", "--url", u, "--queue", "orders:audit", "--queue", "orders:billing", "--queue", "emails:audit")
			ctx := context.Background()
			pub, err := transport.OpenPublisher(ctx, u)
			if err != nil {
				t.Fatal(err)
			}
			defer pub.Close()
			send := func(prefix string, n int) {
				for i := range n {
					if err := pub.Publish("orders", message.NewMessage(prefix+strconv.Itoa(i), []byte("x"))); err != nil {
						t.Fatal(err)
					}
				}
			}
			send("a", 4)

			out := mustRun(t, "groups", u)
			for _, want := range []string{"TOPIC", "LAST READER", "berth_q_orders__audit", "never", "no subscriber reports to the fleet table"} {
				if !strings.Contains(out, want) {
					t.Fatalf("groups lacks %q:\n%s", want, out)
				}
			}
			gs := groupsJSON(t, "--url", u, "orders")
			if len(gs) != 2 || gs["orders:audit"].Ready != 4 || gs["orders:billing"].Ready != 4 || gs["orders:audit"].LastReader.Basis != inspect.ReadNever {
				t.Fatalf("groups of orders: %+v", gs)
			}

			code, stdout, stderr := runCmd(t, "groups", "retire", u, "orders", "audit")
			if code != 1 || !strings.Contains(stderr, "berth groups retire: consumer group has messages") || !strings.Contains(stderr, "holds 4 message(s)") || !strings.Contains(stderr, "--force") {
				t.Fatalf("retire with messages: exit %d\nstdout: %s\nstderr: %s", code, stdout, stderr)
			}
			if gs := groupsJSON(t, u); gs["orders:audit"].Ready != 4 {
				t.Fatalf("a refused retire changed audit: %+v", gs)
			}

			out = mustRun(t, "groups", "retire", "--url", u, "orders", "audit", "--force", "--grace", "1500ms")
			for _, want := range []string{"unregistered group audit of topic orders", "waited 1.5s", "dropped berth_q_orders__audit (4 message(s))"} {
				if !strings.Contains(out, want) {
					t.Fatalf("retire --force lacks %q:\n%s", want, out)
				}
			}
			send("b", 3) // this publisher had audit cached before the retire
			gs = groupsJSON(t, u)
			if _, ok := gs["orders:audit"]; ok || gs["orders:billing"].Ready != 7 || gs["emails:audit"].Queue == "" || len(gs) != 2 {
				t.Fatalf("groups after retire: %+v", gs)
			}
			for _, q := range queueStats(t, u) {
				if q.Queue == "berth_q_orders__audit" {
					t.Fatalf("the retired queue is back: %+v", q)
				}
			}
			out = mustRun(t, "groups", "retire", u, "orders", "audit")
			if !strings.Contains(out, "nothing to retire") {
				t.Fatalf("second retire:\n%s", out)
			}
		})
	}
}

func TestGroupsUsage(t *testing.T) {
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"groups", "retire", "sqlite://:memory:", "orders"}, "berth groups retire: needs TOPIC and GROUP, got 1 argument(s); see --help"},
		{[]string{"groups", "retire", "sqlite://:memory:", "orders", "a", "--grace", "-1s"}, "berth groups retire: --grace must be ≥ 0, got -1s; see --help"},
		{[]string{"groups", "sqlite://:memory:", "orders", "extra"}, `berth groups: unexpected argument "extra"; see --help`},
		{[]string{"groups", "--frob"}, "berth groups: unknown flag --frob; see --help"},
		{[]string{"groups", "orders"}, "berth groups: --url is required (postgres://…, sqlite:///path.db, sqlserver://…, sqs://…); or set BERTH_URL; see --help"},
	}
	t.Setenv("BERTH_URL", "")
	for _, c := range cases {
		code, out, errs := runCmd(t, c.args...)
		if code != 2 || errs != c.want+"\n" || out != "" {
			t.Errorf("berth %s: exit %d\nstderr: %q\nwant:   %q\nstdout: %q", strings.Join(c.args, " "), code, errs, c.want+"\n", out)
		}
	}
	for _, c := range [][]string{{"groups"}, {"groups", "retire"}} {
		code, out, errs := runCmd(t, append(c, "--help")...)
		if code != 0 || out != "" || !strings.HasPrefix(errs, "Usage: berth "+strings.Join(c, " ")) || !strings.Contains(errs, "Flags:") {
			t.Fatalf("%v --help: exit %d\n%s", c, code, errs)
		}
	}
}
