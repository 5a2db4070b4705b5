package sqlite_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/berth-go/berth/receiver"
	"github.com/berth-go/berth/transport"
	"github.com/berth-go/berth/transport/sqlite"
)

// A sqlite:// URL without a path is ErrInvalidConfig. (Bad parameters:
// the kit's BadURLParameterNamesItself.)
func TestURLWithoutPath(t *testing.T) {
	_, err := transport.OpenPublisher(context.Background(), "sqlite://")
	if !errors.Is(err, transport.ErrInvalidConfig) {
		t.Fatalf("empty path: err = %v", err)
	}
}

// The flat config: DSN is the database path, the pipeline the one nested
// block; a config without DSN or DB, or asking the one-connection pool for
// more, names the field.
func TestFlatConfig(t *testing.T) {
	path := filepath.Join(t.TempDir(), "flat.db")
	sub, err := sqlite.NewSubscriber(sqlite.SubscriberConfig{DSN: path, Lease: time.Minute, Pipeline: receiver.Config{Concurrency: 4}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := sub.SubscribeInitialize("flat"); err != nil {
		t.Fatal(err)
	}
	if err := sub.Close(); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		cfg  sqlite.SubscriberConfig
		want string
	}{
		{sqlite.SubscriberConfig{}, "DSN: required when DB is nil"},
		{sqlite.SubscriberConfig{DSN: path, MaxOpenConns: 2}, "MaxOpenConns: a SQLite pool holds one connection, got 2"},
	} {
		_, err := sqlite.NewSubscriber(c.cfg, nil)
		if !errors.Is(err, transport.ErrInvalidConfig) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: err = %v, want %q", c.cfg, err, c.want)
		}
	}
	if _, err := sqlite.NewPublisher(sqlite.PublisherConfig{}, nil); err == nil || !strings.Contains(err.Error(), "DSN: required when DB is nil") {
		t.Errorf("publisher without DSN: %v", err)
	}
}

// groups= declares consumer groups on the publisher's URL: they receive
// what it publishes before any of their subscribers started; an empty
// declared group is refused at construction, naming the field.
func TestURLDeclaredGroups(t *testing.T) {
	path := filepath.Join(t.TempDir(), "groups.db")
	ctx := context.Background()
	pub, err := transport.OpenPublisher(ctx, "sqlite://"+path+"?groups=orders:billing,*:audit")
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	for i := range 4 {
		if err := pub.Publish("orders", message.NewMessage(fmt.Sprint(i), []byte("x"))); err != nil {
			t.Fatal(err)
		}
	}
	for _, g := range []string{"billing", "audit"} {
		sub, err := transport.OpenSubscriber(ctx, "sqlite://"+path+"?consumer_group="+g+"&empty_delay=50ms")
		if err != nil {
			t.Fatal(err)
		}
		ch, err := sub.Subscribe(ctx, "orders")
		if err != nil {
			t.Fatal(err)
		}
		for got := range 4 {
			select {
			case m := <-ch:
				m.Ack()
			case <-time.After(10 * time.Second):
				t.Fatalf("group %s received %d of 4", g, got)
			}
		}
		if err := sub.Close(); err != nil {
			t.Fatal(err)
		}
	}
	_, err = sqlite.NewPublisher(sqlite.PublisherConfig{DSN: path, Groups: map[string][]string{"orders": {""}}}, nil)
	if !errors.Is(err, transport.ErrInvalidConfig) || !strings.Contains(err.Error(), "Groups:") {
		t.Fatalf("a too long declared group: err = %v", err)
	}
}

// A parameter appended with & to a URL that had no ? would open a file
// named "cqrs2.db&consumer_group=X": refused with an error showing the
// URL as it should be written. Names with & or = but no key=value after
// them still open.
func TestURLQueryInPath(t *testing.T) {
	dir := t.TempDir()
	for _, raw := range []string{
		"sqlite://" + dir + "/cqrs2.db&consumer_group=X",
		"sqlite://" + dir + "/cqrs2.db&lease=10s&consumer_group=X",
		"sqlite://" + dir + "/cqrs2.db%3Fconsumer_group=X",
		"sqlite://" + dir + "/cqrs2.db&consumer_group=X?lease=10s",
	} {
		for side, open := range map[string]func() error{
			"publisher": func() error {
				p, err := transport.OpenPublisher(context.Background(), raw)
				if err == nil {
					_ = p.Close()
				}
				return err
			},
			"subscriber": func() error {
				s, err := transport.OpenSubscriber(context.Background(), raw)
				if err == nil {
					_ = s.Close()
				}
				return err
			},
		} {
			err := open()
			if !errors.Is(err, transport.ErrInvalidConfig) || !strings.Contains(err.Error(), "sqlite://"+dir+"/cqrs2.db?") {
				t.Errorf("%s %s: err = %v, want ErrInvalidConfig showing sqlite://%s/cqrs2.db?…", side, raw, err, dir)
			}
		}
	}
	for _, name := range []string{"a&b.db", "x=y.db", "sub=dir/plain.db"} {
		raw := "sqlite://" + dir + "/" + name
		if err := os.MkdirAll(filepath.Dir(dir+"/"+name), 0o755); err != nil {
			t.Fatal(err)
		}
		p, err := transport.OpenPublisher(context.Background(), raw)
		if err != nil {
			t.Fatalf("%s: %v", raw, err)
		}
		_ = p.Close()
	}
}
