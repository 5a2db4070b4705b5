package sqlserver

import (
	"context"
	"fmt"
	"net/url"
	"strings"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/berth-go/berth/internal/sqlurl"
	"github.com/berth-go/berth/internal/urlparam"
	"github.com/berth-go/berth/transport"
)

func init() {
	transport.Register("sqlserver", driver{})
}

type driver struct{}

// ConnParams are the go-mssqldb connection parameters (v1.11) that a
// sqlserver:// URL passes through to the driver untouched, matched without
// regard to case as go-mssqldb matches them. Every other query parameter
// must be one of Berth's.
var ConnParams = []string{
	"database", "encrypt", "password", "user id", "port", "server", "protocol",
	"trustservercertificate", "certificate", "servercertificate", "hostnameincertificate", "tlsmin",
	"packet size", "log", "connection timeout", "dial timeout", "keepalive", "disableretry",
	"app name", "workstation id", "applicationintent", "serverspn",
	"failoverpartner", "failoverport", "failoverpartnerspn", "multisubnetfailover",
	"pipe", "notraceid", "guid conversion", "timezone", "epa enabled", "columnencryption",
	"fedauth", "applicationclientid", "clientcertpath", "clientassertion", "resource id",
	"additionallyallowedtenants", "disableinstancediscovery", "sendcertificatechain",
	"serviceconnectionid", "systemtoken", "tokenfilepath", "userassertion",
	"authenticator", "krb5-configfile", "krb5-keytabfile", "krb5-credcachefile", "krb5-realm",
	"krb5-dnslookupkdc", "krb5-udppreferencelimit",
}

var connParamSet = func() map[string]bool {
	m := make(map[string]bool, len(ConnParams))
	for _, k := range ConnParams {
		m[k] = true
	}
	return m
}()

// splitURL separates u's query into go-mssqldb's parameters, which stay in
// the returned DSN, and Berth's, returned as Params with the driver's
// marked as read (so an unknown parameter's error lists both kinds), and
// reads max_conns.
func splitURL(u *url.URL) (dsn string, maxConns int, p *urlparam.Params) {
	conn := url.Values{}
	berth := url.Values{}
	for k, vs := range u.Query() {
		if lk := strings.ToLower(k); connParamSet[lk] {
			conn[k] = vs
			berth[lk] = vs
			continue
		}
		berth[k] = vs
	}
	p = urlparam.New(berth)
	for _, k := range ConnParams {
		p.Has(k)
	}
	maxConns = p.Int("max_conns", DefaultSharedMaxConns, 1, 1000)
	du := *u
	du.RawQuery = conn.Encode()
	return du.String(), maxConns, p
}

// ParsePublisherURL returns the publisher config a sqlserver:// URL
// describes: go-mssqldb's parameters stay in DSN, Berth's set the fields.
// The subscriber's parameters are accepted too (checked, then ignored): one
// URL serves both sides. An unknown or invalid parameter is an error naming
// it, wrapped in transport.ErrInvalidConfig.
func ParsePublisherURL(u *url.URL) (PublisherConfig, error) {
	var cfg PublisherConfig
	dsn, maxConns, p := splitURL(u)
	cfg.DSN, cfg.MaxOpenConns = dsn, maxConns
	sqlurl.Publisher(p, &cfg)
	if err := p.Err(); err != nil {
		return PublisherConfig{}, fmt.Errorf("%w: sqlserver URL: %w", transport.ErrInvalidConfig, err)
	}
	return cfg, nil
}

// ParseSubscriberURL returns the subscriber config a sqlserver:// URL
// describes (see ParsePublisherURL; the publisher's parameters are
// accepted, checked and ignored).
func ParseSubscriberURL(u *url.URL) (SubscriberConfig, error) {
	var cfg SubscriberConfig
	dsn, maxConns, p := splitURL(u)
	cfg.DSN, cfg.MaxOpenConns = dsn, maxConns
	sqlurl.Subscriber(p, &cfg)
	if err := p.Err(); err != nil {
		return SubscriberConfig{}, fmt.Errorf("%w: sqlserver URL: %w", transport.ErrInvalidConfig, err)
	}
	return cfg, nil
}

func (driver) OpenPublisher(_ context.Context, u *url.URL, opts transport.Options) (message.Publisher, error) {
	cfg, err := ParsePublisherURL(u)
	if err != nil {
		return nil, err
	}
	pub, err := NewPublisher(cfg, opts.Logger)
	if err != nil {
		return nil, err
	}
	return pub, nil
}

func (driver) OpenSubscriber(_ context.Context, u *url.URL, opts transport.Options) (transport.StatefulSubscriber, error) {
	cfg, err := ParseSubscriberURL(u)
	if err != nil {
		return nil, err
	}
	cfg.Pipeline.Observer = opts.Observer
	if cfg.ConsumerGroup, err = opts.ConsumerGroupFor(cfg.ConsumerGroup); err != nil {
		return nil, fmt.Errorf("sqlserver URL: %w", err)
	}
	// Not NewSubscriber's result as it is: a nil *Subscriber in a
	// non-nil interface on error.
	sub, err := NewSubscriber(cfg, opts.Logger)
	if err != nil {
		return nil, err
	}
	return sub, nil
}
