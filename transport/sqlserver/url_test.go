package sqlserver

import (
	"context"
	"errors"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/berth-go/berth/transport"
)

func mustURL(t *testing.T, s string) *url.URL {
	t.Helper()
	u, err := url.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

func TestParseSubscriberURLSeparatesDriverParams(t *testing.T) {
	u := mustURL(t, "sqlserver://sa:p%40ss@db.example:1433/inst?database=queues&encrypt=true&TrustServerCertificate=true&app+name=svc"+
		"&concurrency=4&consumer_group=billing&lease=45s&fetch_timeout=2m&max_conns=3&schema=app&retry_delay=10ms")
	cfg, err := ParseSubscriberURL(u)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Pipeline.Concurrency != 4 || cfg.ConsumerGroup != "billing" || cfg.Lease != 45*time.Second ||
		cfg.FetchTimeout != 2*time.Minute || cfg.MaxOpenConns != 3 || cfg.Tables.Schema != "app" ||
		cfg.Pipeline.RetryDelay != 10*time.Millisecond {
		t.Errorf("config = %+v", cfg)
	}
	d := mustURL(t, cfg.DSN)
	if d.Scheme != "sqlserver" || d.Host != "db.example:1433" || d.Path != "/inst" || d.User.String() != "sa:p%40ss" {
		t.Errorf("DSN lost its server or credentials: %s", cfg.DSN)
	}
	q := d.Query()
	want := map[string]string{"database": "queues", "encrypt": "true", "TrustServerCertificate": "true", "app name": "svc"}
	for k, v := range want {
		if q.Get(k) != v {
			t.Errorf("DSN parameter %q = %q, want %q (DSN %s)", k, q.Get(k), v, cfg.DSN)
		}
	}
	if len(q) != len(want) {
		t.Errorf("DSN carries Berth's parameters: %s", cfg.DSN)
	}
}

func TestParsePublisherURL(t *testing.T) {
	cfg, err := ParsePublisherURL(mustURL(t, "sqlserver://sa:x@localhost?database=test&ttl=1h&delay=5s&max_message_size=1024&table_prefix=q_"))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.TTL != time.Hour || cfg.Delay != 5*time.Second || cfg.MaxMessageSize != 1024 || cfg.Tables.Prefix != "q_" || cfg.MaxOpenConns != DefaultSharedMaxConns {
		t.Errorf("config = %+v", cfg)
	}
	if cfg.DSN != "sqlserver://sa:x@localhost?database=test" {
		t.Errorf("DSN = %s", cfg.DSN)
	}
}

func TestParseURLBadParameterNamesItself(t *testing.T) {
	for _, c := range []struct{ query, says string }{
		{"concurency=4", `concurency`},
		{"lease=forever", `"lease"`},
		{"max_conns=0", `"max_conns"`},
		{"consumer_group=a&consumer_group=b", `"consumer_group"`},
	} {
		_, err := ParseSubscriberURL(mustURL(t, "sqlserver://sa:x@localhost?database=test&"+c.query))
		if !errors.Is(err, transport.ErrInvalidConfig) {
			t.Errorf("%s: err = %v, want ErrInvalidConfig", c.query, err)
			continue
		}
		if !strings.Contains(err.Error(), c.says) {
			t.Errorf("%s: %q does not name %s", c.query, err, c.says)
		}
	}
	// The list of accepted parameters names Berth's and the driver's.
	_, err := ParseSubscriberURL(mustURL(t, "sqlserver://localhost?bogus=1"))
	for _, w := range []string{"bogus", "concurrency", "consumer_group", "database", "encrypt"} {
		if err == nil || !strings.Contains(err.Error(), w) {
			t.Errorf("unknown parameter error %v does not mention %s", err, w)
		}
	}
	// One URL serves both sides: a publisher accepts the subscriber's
	// parameters, and checks them.
	if _, err := ParsePublisherURL(mustURL(t, "sqlserver://localhost?lease=10s&max_attempts=3")); err != nil {
		t.Errorf("publisher with lease and max_attempts: %v", err)
	}
	if _, err := ParsePublisherURL(mustURL(t, "sqlserver://localhost?lease=forever")); !errors.Is(err, transport.ErrInvalidConfig) || !strings.Contains(err.Error(), `"lease"`) {
		t.Errorf("publisher with lease=forever: %v", err)
	}
}

func TestSchemeRegistered(t *testing.T) {
	if !slices.Contains(transport.Schemes(), "sqlserver") {
		t.Fatalf("schemes = %v", transport.Schemes())
	}
	ctx := context.Background()
	if _, err := transport.OpenSubscriber(ctx, "sqlserver://localhost?database=test&nope=1"); !errors.Is(err, transport.ErrInvalidConfig) {
		t.Errorf("OpenSubscriber with a bad parameter: %v", err)
	}
	if _, err := transport.OpenPublisher(ctx, "sqlserver://localhost?database=test&nope=1"); !errors.Is(err, transport.ErrInvalidConfig) {
		t.Errorf("OpenPublisher with a bad parameter: %v", err)
	}
}

// TestOpenWithoutServer builds a publisher and a subscriber from URLs
// without reaching a server (neither connects before first use) and closes
// them.
func TestOpenWithoutServer(t *testing.T) {
	ctx := context.Background()
	sub, err := transport.OpenSubscriber(ctx, "sqlserver://sa:x@127.0.0.1:1?database=test&concurrency=4&max_conns=2")
	if err != nil {
		t.Fatal(err)
	}
	pub, err := transport.OpenPublisher(ctx, "sqlserver://sa:x@127.0.0.1:1?database=test")
	if err != nil {
		t.Fatal(err)
	}
	if err := pub.Close(); err != nil {
		t.Error(err)
	}
	if err := sub.Close(); err != nil {
		t.Error(err)
	}
	if err := sub.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

func TestConstructorsNeedDSNOrDB(t *testing.T) {
	if _, err := NewSubscriber(SubscriberConfig{}, nil); !errors.Is(err, transport.ErrInvalidConfig) || !strings.Contains(err.Error(), "DSN") {
		t.Errorf("NewSubscriber without DSN: %v", err)
	}
	if _, err := NewPublisher(PublisherConfig{}, nil); !errors.Is(err, transport.ErrInvalidConfig) || !strings.Contains(err.Error(), "DSN") {
		t.Errorf("NewPublisher without DSN: %v", err)
	}
	// An invalid engine config fails the constructor and closes the pool it
	// opened.
	cfg := SubscriberConfig{DSN: "sqlserver://localhost?database=test"}
	cfg.Lease = time.Millisecond
	if _, err := NewSubscriber(cfg, nil); !errors.Is(err, transport.ErrInvalidConfig) || !strings.Contains(err.Error(), "Lease") {
		t.Errorf("NewSubscriber with a 1ms lease: %v", err)
	}
}

// TestEntraIDAuthentication checks that a fedauth parameter (in a URL or a
// DSN) opens the pool through go-mssqldb's azuread package, which checks
// each workflow's required parameters when the pool is opened, without
// connecting; and that without it the plain driver is used.
func TestEntraIDAuthentication(t *testing.T) {
	for _, c := range []struct {
		dsn     string
		wantErr string
	}{
		{"sqlserver://app@db.example.invalid?database=orders&fedauth=ActiveDirectoryDefault", ""},
		{"sqlserver://app@db.example.invalid?database=orders&fedauth=ActiveDirectoryManagedIdentity", ""},
		{"server=db.example.invalid;database=orders;fedauth=ActiveDirectoryDefault", ""},
		// A service principal needs its secret (or a certificate): the
		// azuread package says so, proving it read the DSN.
		{"sqlserver://client-id@db.example.invalid?database=orders&fedauth=ActiveDirectoryServicePrincipal", "password"},
		{"sqlserver://sa:secret@db.example.invalid?database=orders", ""},
	} {
		db, err := Open(c.dsn, 2)
		if c.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), c.wantErr) {
				t.Errorf("%s: err = %v, want one naming %q", c.dsn, err, c.wantErr)
			}
			if err != nil && strings.Contains(err.Error(), "secret") {
				t.Errorf("%s: the error repeats the password: %v", c.dsn, err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", c.dsn, err)
			continue
		}
		_ = db.Close()
	}
	// The URL passes fedauth through to the DSN, not to Berth's parameters.
	cfg, err := ParseSubscriberURL(mustURL(t, "sqlserver://app@db.example.invalid?database=orders&fedauth=ActiveDirectoryDefault&concurrency=4"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(cfg.DSN, "fedauth=ActiveDirectoryDefault") || strings.Contains(cfg.DSN, "concurrency") {
		t.Errorf("DSN = %q", cfg.DSN)
	}
}

// TestBadDriverParameterIsInvalidConfig checks that a go-mssqldb parameter
// with a bad value fails at construction as ErrInvalidConfig, without the
// password.
func TestBadDriverParameterIsInvalidConfig(t *testing.T) {
	for _, u := range []string{
		"sqlserver://sa:secret@127.0.0.1:1?database=test&encrypt=bogus",
		"sqlserver://sa:secret@127.0.0.1:1?database=test&connection+timeout=x",
		"sqlserver://sa:secret@127.0.0.1:1?database=test&log=x",
	} {
		_, err := transport.OpenSubscriber(context.Background(), u)
		if !errors.Is(err, transport.ErrInvalidConfig) || strings.Contains(err.Error(), "secret") {
			t.Errorf("%s: %v", u, err)
		}
		_, err = transport.OpenPublisher(context.Background(), u)
		if !errors.Is(err, transport.ErrInvalidConfig) {
			t.Errorf("%s: publisher: %v", u, err)
		}
	}
}

// groups= reaches PublisherConfig.Groups; a declared group longer than the
// subscriptions column is refused at construction, naming the field.
func TestURLDeclaredGroupTooLong(t *testing.T) {
	long := strings.Repeat("g", MaxConsumerGroupLength+1)
	_, err := transport.OpenPublisher(context.Background(), "sqlserver://u:p@127.0.0.1:1/db?groups=orders:billing,orders:"+long)
	if !errors.Is(err, transport.ErrInvalidConfig) || !strings.Contains(err.Error(), `Groups["orders"]: ConsumerGroup: at most 128`) {
		t.Fatalf("err = %v", err)
	}
}
