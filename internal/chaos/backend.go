package chaos

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/berth-go/berth/receiver"
	"github.com/berth-go/berth/transport"
	"github.com/berth-go/berth/transport/postgres"
	"github.com/berth-go/berth/transport/sqlite"
	"github.com/berth-go/berth/transport/sqlqueue"
	"github.com/berth-go/berth/transport/sqs"
)

// subscriber is what the harness needs of a Berth subscriber.
type subscriber interface {
	message.Subscriber
	message.SubscribeInitializer
	transport.StateSource
}

// link is an instance's connection to the broker, which the harness can
// fault and kill.
type link interface {
	kill()
	close()
}

// backend adapts one transport to the harness.
type backend interface {
	name() string
	kinds() []Kind // the infrastructure faults this backend supports
	publisher(ctx context.Context) (message.Publisher, error)
	// instance opens a subscriber whose broker traffic goes through its own
	// link.
	instance(ctx context.Context, id string, p receiver.Config) (subscriber, link, error)
	// inject starts a fault on every live link (or the broker) and returns
	// a function that ends it.
	inject(ctx context.Context, k Kind, links []link, rnd func() float64) (detail string, end func(), err error)
	// deadLetters returns the message ids dead-lettered since the last call.
	deadLetters(ctx context.Context) ([]string, error)
	// leftover counts the rows or messages still at the broker.
	leftover(ctx context.Context) (int, error)
	close(ctx context.Context) error
}

// ---- SQL (PostgreSQL, SQLite) ----

type sqlBackend struct {
	kind   string
	topic  string
	tables sqlqueue.Tables
	q      sqlqueue.Queue
	names  sqlqueue.Names

	// PostgreSQL
	baseURL *url.URL
	appPfx  string
	admin   *sql.DB
	// SQLite
	path string

	ph     func(int) string
	lastDL int64
	cfg    *Config
}

func newPostgres(ctx context.Context, cfg *Config, run string) (*sqlBackend, error) {
	u, err := url.Parse(cfg.URL)
	if err != nil {
		return nil, fmt.Errorf("chaos: postgres URL: %w", err)
	}
	b := &sqlBackend{kind: "postgres", topic: "chaos_" + run, baseURL: u, appPfx: "berthchaos-" + run + "-", cfg: cfg,
		ph: func(i int) string { return "$" + strconv.Itoa(i) }}
	b.tables = sqlqueue.Tables{Schema: "chaos_" + run}
	b.admin, err = postgres.Open(b.dsn(u.Host, "berthchaosadmin-"+run), 2)
	if err != nil {
		return nil, err
	}
	if _, err := b.admin.ExecContext(ctx, `CREATE SCHEMA IF NOT EXISTS `+b.tables.Schema); err != nil {
		_ = b.admin.Close()
		return nil, fmt.Errorf("chaos: create schema: %w", err)
	}
	b.q = sqlqueue.QueueFor(postgres.Dialect{}, b.tables, b.topic, "")
	b.names = sqlqueue.NamesFor(postgres.Dialect{}, b.tables)
	return b, nil
}

func newSQLite(cfg *Config, run string) (*sqlBackend, error) {
	dir := cfg.URL
	if dir == "" {
		return nil, errors.New("chaos: sqlite needs a directory (Config.URL)")
	}
	b := &sqlBackend{kind: "sqlite", topic: "chaos_" + run, path: filepath.Join(dir, "chaos-"+run+".db"), cfg: cfg,
		ph: func(int) string { return "?" }}
	b.q = sqlqueue.QueueFor(sqlite.Dialect{}, b.tables, b.topic, "")
	b.names = sqlqueue.NamesFor(sqlite.Dialect{}, b.tables)
	b.admin = nil
	return b, nil
}

func (b *sqlBackend) name() string { return b.kind }

func (b *sqlBackend) kinds() []Kind {
	if b.kind == "postgres" {
		return []Kind{KindPGTerminate, KindNetLatency, KindNetReset, KindNetBlackhole, KindKill}
	}
	return []Kind{KindKill}
}

// dsn is the base URL pointed at host with an application name.
func (b *sqlBackend) dsn(host, app string) string {
	u := *b.baseURL
	u.Host = host
	q := u.Query()
	q.Set("application_name", app)
	q.Set("search_path", b.tables.Schema)
	u.RawQuery = q.Encode()
	return u.String()
}

func (b *sqlBackend) sqliteDB() (*sql.DB, error) {
	dsn := "file:" + b.path + "?_txlock=immediate&_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_pragma=synchronous(NORMAL)"
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, err
	}
	db.SetMaxOpenConns(1)
	return db, nil
}

func (b *sqlBackend) adminDB() (*sql.DB, func(), error) {
	if b.admin != nil {
		return b.admin, func() {}, nil
	}
	db, err := b.sqliteDB()
	if err != nil {
		return nil, nil, err
	}
	return db, func() { _ = db.Close() }, nil
}

func (b *sqlBackend) publisher(context.Context) (message.Publisher, error) {
	if b.kind == "postgres" {
		return postgres.NewPublisher(postgres.PublisherConfig{Tables: b.tables, DSN: b.dsn(b.baseURL.Host, b.appPfx+"pub"), MaxOpenConns: 2}, nil)
	}
	return sqlite.NewPublisher(sqlite.PublisherConfig{Tables: b.tables, DSN: b.path}, nil)
}

type sqlLink struct {
	proxy *TCPProxy // PostgreSQL
	db    *sql.DB   // SQLite
	once  sync.Once
}

func (l *sqlLink) kill() {
	l.once.Do(func() {
		if l.proxy != nil {
			l.proxy.Kill()
		}
		if l.db != nil {
			go func() { _ = l.db.Close() }() // Close waits for running statements
		}
	})
}

func (l *sqlLink) close() {
	if l.proxy != nil {
		_ = l.proxy.Close()
	}
	if l.db != nil {
		_ = l.db.Close()
	}
}

func (b *sqlBackend) subConfig(p receiver.Config) sqlqueue.SubscriberConfig {
	return sqlqueue.SubscriberConfig{
		Tables:           b.tables,
		Pipeline:         p,
		Lease:            b.cfg.Lease,
		FetchTimeout:     2 * time.Second,
		SweepInterval:    time.Second,
		StatementTimeout: 5 * time.Second,
	}
}

func (b *sqlBackend) instance(_ context.Context, id string, p receiver.Config) (subscriber, link, error) {
	sc := b.subConfig(p)
	if b.kind == "postgres" {
		px, err := NewTCPProxy(b.baseURL.Host)
		if err != nil {
			return nil, nil, err
		}
		sc.DSN, sc.MaxOpenConns = b.dsn(px.Addr(), b.appPfx+id), 3
		s, err := postgres.NewSubscriber(sc, nil)
		if err != nil {
			_ = px.Close()
			return nil, nil, err
		}
		return s, &sqlLink{proxy: px}, nil
	}
	db, err := b.sqliteDB()
	if err != nil {
		return nil, nil, err
	}
	sc.DB = db
	s, err := sqlite.NewSubscriber(sc, nil)
	if err != nil {
		_ = db.Close()
		return nil, nil, err
	}
	return s, &sqlLink{db: db}, nil
}

func (b *sqlBackend) inject(ctx context.Context, k Kind, links []link, rnd func() float64) (string, func(), error) {
	var ps []*TCPProxy
	for _, l := range links {
		if sl, ok := l.(*sqlLink); ok && sl.proxy != nil {
			ps = append(ps, sl.proxy)
		}
	}
	switch k {
	case KindPGTerminate:
		var n int
		err := b.admin.QueryRowContext(ctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
WHERE left(application_name, $1) = $2 AND pid <> pg_backend_pid()`, len(b.appPfx), b.appPfx).Scan(&n)
		return fmt.Sprintf("terminated %d backends", n), func() {}, err
	case KindNetLatency:
		d := time.Duration(20+rnd()*180) * time.Millisecond
		for _, p := range ps {
			p.SetLatency(d)
		}
		return "latency " + d.String(), func() {
			for _, p := range ps {
				p.SetLatency(0)
			}
		}, nil
	case KindNetReset:
		n := 0
		for _, p := range ps {
			n += p.Reset()
		}
		return fmt.Sprintf("reset %d connections", n), func() {}, nil
	case KindNetBlackhole:
		for _, p := range ps {
			p.Stall(true)
		}
		return "blackhole", func() {
			for _, p := range ps {
				p.Stall(false)
			}
		}, nil
	}
	return "", nil, fmt.Errorf("chaos: %s does not support %s", b.kind, k)
}

func (b *sqlBackend) deadLetters(ctx context.Context) ([]string, error) {
	db, done, err := b.adminDB()
	if err != nil {
		return nil, err
	}
	defer done()
	rows, err := db.QueryContext(ctx, `SELECT id, message_uuid FROM `+b.names.Errors+` WHERE queue_table = `+b.ph(1)+` AND id > `+b.ph(2)+` ORDER BY id`, b.q.Name, b.lastDL)
	if err != nil {
		return nil, nil //nolint:nilerr // the errors table may not exist yet
	}
	defer rows.Close()
	var ids []string
	for rows.Next() {
		var id int64
		var uuid string
		if err := rows.Scan(&id, &uuid); err != nil {
			return nil, err
		}
		b.lastDL = id
		ids = append(ids, uuid)
	}
	return ids, rows.Err()
}

func (b *sqlBackend) leftover(ctx context.Context) (int, error) {
	db, done, err := b.adminDB()
	if err != nil {
		return 0, err
	}
	defer done()
	var n int
	err = db.QueryRowContext(ctx, `SELECT count(*) FROM `+b.q.Table).Scan(&n)
	return n, err
}

func (b *sqlBackend) close(ctx context.Context) error {
	if b.admin == nil {
		return nil
	}
	var err error
	if !b.cfg.Keep {
		_, err = b.admin.ExecContext(ctx, `DROP SCHEMA IF EXISTS `+b.tables.Schema+` CASCADE`)
	}
	return errors.Join(err, b.admin.Close())
}

// ---- SQS ----

type sqsBackend struct {
	endpoint string
	topic    string
	dlq      string
	cfg      *Config
	api      *awssqs.Client
	dlqURL   string
}

func newSQS(cfg *Config, run string) *sqsBackend {
	b := &sqsBackend{endpoint: cfg.URL, topic: "chaos-" + run, dlq: "chaos-" + run + "-dlq", cfg: cfg}
	b.api = awssqs.NewFromConfig(b.awsConfig(), func(o *awssqs.Options) { o.BaseEndpoint = aws.String(b.endpoint) })
	return b
}

func (b *sqsBackend) awsConfig() aws.Config {
	return aws.Config{
		Region:      "us-east-1",
		Credentials: credentials.NewStaticCredentialsProvider("test", "test", ""),
		HTTPClient:  &http.Client{Timeout: 30 * time.Second},
	}
}

func (b *sqsBackend) name() string { return "sqs" }

func (b *sqsBackend) kinds() []Kind {
	return []Kind{KindHTTP5xx, KindHTTPThrottle, KindHTTPTimeout, KindNetLatency, KindKill}
}

func (b *sqsBackend) client(endpoint string) sqs.ClientConfig {
	c := b.awsConfig()
	return sqs.ClientConfig{AWS: &c, Endpoint: endpoint}
}

func (b *sqsBackend) queue() sqs.QueueConfig {
	return sqs.QueueConfig{Create: true, DeadLetterQueue: b.dlq, MaxReceiveCount: -1}
}

func (b *sqsBackend) publisher(context.Context) (message.Publisher, error) {
	return sqs.NewPublisher(sqs.PublisherConfig{Client: b.client(b.endpoint), Queue: b.queue()}, nil)
}

type httpLink struct{ proxy *HTTPProxy }

func (l *httpLink) kill()  { l.proxy.Kill() }
func (l *httpLink) close() { _ = l.proxy.Close() }

func (b *sqsBackend) instance(_ context.Context, _ string, p receiver.Config) (subscriber, link, error) {
	px, err := NewHTTPProxy(b.endpoint, b.cfg.rnd)
	if err != nil {
		return nil, nil, err
	}
	s, err := sqs.NewSubscriber(sqs.SubscriberConfig{
		Pipeline:          p,
		Client:            b.client(px.URL()),
		Queue:             b.queue(),
		WaitTime:          time.Second,
		VisibilityTimeout: b.cfg.Lease,
	}, nil)
	if err != nil {
		_ = px.Close()
		return nil, nil, err
	}
	return s, &httpLink{proxy: px}, nil
}

func (b *sqsBackend) inject(_ context.Context, k Kind, links []link, rnd func() float64) (string, func(), error) {
	var fault HTTPFault
	rate := 0.3 + 0.5*rnd()
	var latency time.Duration
	switch k {
	case KindHTTP5xx:
		fault = HTTP5xx
	case KindHTTPThrottle:
		fault = HTTPThrottle
	case KindHTTPTimeout:
		fault, rate = HTTPTimeout, 0.2
	case KindNetLatency:
		latency = time.Duration(20+rnd()*280) * time.Millisecond
	default:
		return "", nil, fmt.Errorf("chaos: sqs does not support %s", k)
	}
	var ps []*HTTPProxy
	for _, l := range links {
		if hl, ok := l.(*httpLink); ok {
			ps = append(ps, hl.proxy)
		}
	}
	for _, p := range ps {
		p.Set(fault, rate, latency)
	}
	detail := fmt.Sprintf("%.0f%% of requests", rate*100)
	if latency > 0 {
		detail = "latency " + latency.String()
	}
	return detail, func() {
		for _, p := range ps {
			p.Set(HTTPOK, 0, 0)
		}
	}, nil
}

func (b *sqsBackend) queueURL(ctx context.Context, name string) (string, error) {
	out, err := b.api.GetQueueUrl(ctx, &awssqs.GetQueueUrlInput{QueueName: aws.String(name)})
	if err != nil {
		return "", err
	}
	return aws.ToString(out.QueueUrl), nil
}

func (b *sqsBackend) deadLetters(ctx context.Context) ([]string, error) {
	if b.dlqURL == "" {
		u, err := b.queueURL(ctx, b.dlq)
		if err != nil {
			return nil, nil //nolint:nilerr // not created yet
		}
		b.dlqURL = u
	}
	var ids []string
	for {
		out, err := b.api.ReceiveMessage(ctx, &awssqs.ReceiveMessageInput{
			QueueUrl: aws.String(b.dlqURL), MaxNumberOfMessages: 10, MessageAttributeNames: []string{"All"},
		})
		if err != nil {
			return ids, err
		}
		if len(out.Messages) == 0 {
			return ids, nil
		}
		entries := make([]sqstypes.DeleteMessageBatchRequestEntry, 0, len(out.Messages))
		for i, m := range out.Messages {
			ids = append(ids, aws.ToString(m.MessageAttributes[sqs.AttributeUUID].StringValue))
			entries = append(entries, sqstypes.DeleteMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), ReceiptHandle: m.ReceiptHandle})
		}
		if _, err := b.api.DeleteMessageBatch(ctx, &awssqs.DeleteMessageBatchInput{QueueUrl: aws.String(b.dlqURL), Entries: entries}); err != nil {
			return ids, err
		}
	}
}

func (b *sqsBackend) leftover(ctx context.Context) (int, error) {
	u, err := b.queueURL(ctx, sqs.SanitizeName(b.topic, false))
	if err != nil {
		return 0, err
	}
	out, err := b.api.GetQueueAttributes(ctx, &awssqs.GetQueueAttributesInput{QueueUrl: aws.String(u), AttributeNames: []sqstypes.QueueAttributeName{
		sqstypes.QueueAttributeNameApproximateNumberOfMessages,
		sqstypes.QueueAttributeNameApproximateNumberOfMessagesNotVisible,
		sqstypes.QueueAttributeNameApproximateNumberOfMessagesDelayed,
	}})
	if err != nil {
		return 0, err
	}
	n := 0
	for _, v := range out.Attributes {
		x, _ := strconv.Atoi(v)
		n += x
	}
	return n, nil
}

func (b *sqsBackend) close(ctx context.Context) error {
	if b.cfg.Keep {
		return nil
	}
	for _, name := range []string{sqs.SanitizeName(b.topic, false), b.dlq} {
		if u, err := b.queueURL(ctx, name); err == nil {
			_, _ = b.api.DeleteQueue(ctx, &awssqs.DeleteQueueInput{QueueUrl: aws.String(u)})
		}
	}
	return nil
}
