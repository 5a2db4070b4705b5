package sqlserver_test

import (
	"net/url"
	"strings"
	"testing"

	"github.com/berth-go/berth/transport/sqlqueue/sqlqueuetest"
	"github.com/berth-go/berth/transport/sqlserver"
)

// FuzzURL parses arbitrary sqlserver:// URLs as subscriber and publisher
// configs (no server needed): ParseSubscriberURL and ParsePublisherURL
// never panic, and every error they return is ErrInvalidConfig without the
// password, given in the user info or as go-mssqldb's password parameter.
func FuzzURL(f *testing.F) {
	sqlqueuetest.FuzzURL(f, sqlqueuetest.URLFuzz{
		Seeds: []string{
			"sqlserver://sa:p%40ss@db.example:1433/inst?database=queues&encrypt=true&TrustServerCertificate=true&app+name=svc" +
				"&concurrency=4&consumer_group=billing&lease=45s&fetch_timeout=2m&max_conns=3&schema=app&retry_delay=10ms",
			"sqlserver://sa:x@localhost?database=test&ttl=1h&delay=5s&max_message_size=1024&table_prefix=q_",
			"sqlserver://sa:x@localhost?database=test&concurency=4",
			"sqlserver://sa:x@localhost?database=test&lease=forever",
			"sqlserver://sa:x@localhost?database=test&max_conns=0",
			"sqlserver://sa:x@localhost?database=test&consumer_group=a&consumer_group=b",
			"sqlserver://localhost?bogus=1",
			"sqlserver://localhost?lease=10s",
			"sqlserver://localhost?database=test&nope=1",
			"sqlserver://sa:x@127.0.0.1:1?database=test&concurrency=4&max_conns=2",
			"sqlserver://localhost?database=test&user+id=sa&password=x&Password=y&lease=soon",
		},
		URL: func(raw string) (*url.URL, bool) {
			u, err := url.Parse(raw)
			if err != nil {
				return nil, false
			}
			u.Scheme = "sqlserver"
			// go-mssqldb also takes the password as a parameter: give it
			// the password the kit checks errors for.
			q := u.Query()
			secret := false
			for k, vs := range q {
				if strings.EqualFold(k, "password") {
					for i := range vs {
						vs[i] = sqlqueuetest.FuzzPassword
					}
					secret = true
				}
			}
			if secret {
				u.RawQuery = q.Encode()
			}
			return u, true
		},
		Calls: map[string]func(*url.URL) error{
			"ParseSubscriberURL": func(u *url.URL) error { _, err := sqlserver.ParseSubscriberURL(u); return err },
			"ParsePublisherURL":  func(u *url.URL) error { _, err := sqlserver.ParsePublisherURL(u); return err },
		},
	})
}
