package console

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"html/template"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/berth-go/berth/internal/inspect"
)

// Source is what the console reads and changes: *inspect.SQL and
// *inspect.SQS implement it.
type Source interface {
	// Queues returns every queue's counts.
	Queues(ctx context.Context) ([]inspect.QueueStats, error)
	// DeadLetterPage returns one page of the dead letters f selects.
	DeadLetterPage(ctx context.Context, f inspect.Filter, cursor string, limit int) (inspect.Page, error)
	// ReplayDelayed moves the dead letters f selects back to their queue,
	// fenced: each is moved at most once whoever else acts at the time.
	ReplayDelayed(ctx context.Context, f inspect.Filter, delay time.Duration) ([]inspect.DeadLetter, error)
	// Purge deletes the dead letters f selects, with the same fence.
	Purge(ctx context.Context, f inspect.Filter, dryRun bool) ([]inspect.DeadLetter, error)
}

// Defaults of Config.
const (
	DefaultSampleInterval = 10 * time.Second
	DefaultWindow         = time.Hour
	DefaultPageSize       = 50
	DefaultPreviewLimit   = 64 << 10
	DefaultRefresh        = 5 * time.Second
	DefaultHistoryKeep    = 24 * time.Hour
)

// ErrInvalidConfig wraps every problem New finds in a Config.
var ErrInvalidConfig = errors.New("console: invalid config")

// Config configures a Server. The zero value (with a Source) is a
// read-write console without authentication, for a loopback address.
type Config struct {
	// Source is the deployment shown. Required.
	Source Source
	// Kind names the transport ("postgres", "sqlite", "sqlserver", "sqs"),
	// shown in the header. Defaults to "".
	Kind string
	// ReadOnly hides every action and makes the API refuse them (403).
	// Defaults to false.
	ReadOnly bool
	// Auth is the credentials every request must carry. Defaults to none.
	Auth Auth
	// SampleInterval is how often the sampler reads the queues' counts
	// for the history. Defaults to DefaultSampleInterval.
	SampleInterval time.Duration
	// Window is how much history is kept in memory at every sample.
	// Defaults to DefaultWindow.
	Window time.Duration
	// HistoryKeep is how much history the database keeps, one sample per
	// queue and minute, so a restarted console still shows it: on SQL
	// transports a read-write console writes it to the
	// <prefix>console_history table (created on first use) and deletes
	// samples older than this; every console, read-only ones too, reads
	// it at its first sample. A read-only console writes nothing. SQS
	// has no such table: its history starts empty. Defaults to
	// DefaultHistoryKeep.
	HistoryKeep time.Duration
	// NoStoredHistory keeps the history in memory only: nothing is read
	// from or written to the database. Defaults to false.
	NoStoredHistory bool
	// PageSize is the dead letters per page. Defaults to DefaultPageSize.
	PageSize int
	// PreviewLimit caps the body preview, in bytes. Defaults to
	// DefaultPreviewLimit.
	PreviewLimit int
	// Refresh is how often the pages poll for fresh counts. Defaults to
	// DefaultRefresh.
	Refresh time.Duration
	// HealthURLs are the health endpoints of the services whose listeners
	// the Fleet page shows, on any transport (on SQS the only way): each
	// is the absolute http(s) URL of a health.Handler's report, such as
	// http://svc:8081/healthz. The console GETs them when the Fleet page
	// or /api/fleet is read, concurrently, each within HealthTimeout, at
	// most once per HealthCacheTTL, reading at most MaxHealthResponse
	// bytes; one that does not answer with a report shows as
	// unreachable. Defaults to none.
	HealthURLs []string
	// Prefix is the path the handler is mounted under, such as
	// "/ops/berth": every route answers below it, and every link, form
	// action, asset URL and redirect the console generates starts with
	// it. Mount the handler with the prefix as is (mux.Handle("/ops/berth/",
	// h)): the handler strips it itself. It must start with "/" and is
	// kept without a trailing slash. Defaults to "" (the root).
	Prefix string
	// AllowedHosts are the Host names (without port; case-insensitive)
	// the console answers besides loopback IPs, localhost and the
	// connection's own IP when Auth has no credentials: the names an
	// embedding service is reached by, behind its own authentication
	// middleware. "*" allows any Host; use it only when every request
	// reaching the handler is authenticated by the service, since without
	// credentials the Host check is what stops DNS rebinding. With Auth
	// set, the Host is not checked. Defaults to none.
	AllowedHosts []string
	// Logger receives failed requests and sampler errors. Defaults to
	// discarding.
	Logger *slog.Logger
	// Now is the clock. Defaults to time.Now.
	Now func() time.Time
}

//go:embed assets
var assets embed.FS

// Server serves the console. Create it with New, start its sampler with
// Start, serve Handler, and stop it with Close.
type Server struct {
	cfg     Config
	pages   map[string]*template.Template
	static  http.Handler
	history *history
	health  *healthPoller // nil without HealthURLs
	store   historyStore  // nil without a database history

	storeMu  sync.Mutex // guards loaded and recorded, and orders the database history's calls
	loaded   bool       // the stored history was read
	recorded time.Time  // the minute last written

	mu      sync.Mutex
	started bool
	stop    context.CancelFunc
	done    chan struct{}
}

// New checks cfg, applies its defaults and returns a Server. It starts
// nothing.
func New(cfg Config) (*Server, error) {
	var errs []error
	if cfg.Source == nil {
		errs = append(errs, errors.New("Source is required"))
	}
	if cfg.SampleInterval < 0 || cfg.Window < 0 || cfg.HistoryKeep < 0 || cfg.PageSize < 0 || cfg.PreviewLimit < 0 || cfg.Refresh < 0 {
		errs = append(errs, errors.New("SampleInterval, Window, HistoryKeep, PageSize, PreviewLimit and Refresh must not be negative"))
	}
	if cfg.PageSize > 1000 {
		errs = append(errs, fmt.Errorf("PageSize %d is over 1000", cfg.PageSize))
	}
	if err := cfg.Auth.check(); err != nil {
		errs = append(errs, err)
	}
	if err := checkHealthURLs(cfg.HealthURLs); err != nil {
		errs = append(errs, err)
	}
	cfg.Prefix = strings.TrimSuffix(cfg.Prefix, "/")
	if err := checkPrefix(cfg.Prefix); err != nil {
		errs = append(errs, err)
	}
	for _, h := range cfg.AllowedHosts {
		if h == "" || strings.ContainsAny(h, "/:?#@ ") && !strings.HasPrefix(h, "[") {
			errs = append(errs, fmt.Errorf("AllowedHosts: %q is not a host name (no port, scheme or path)", h))
		}
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, errors.Join(errs...))
	}
	if cfg.SampleInterval == 0 {
		cfg.SampleInterval = DefaultSampleInterval
	}
	if cfg.Window == 0 {
		cfg.Window = DefaultWindow
	}
	if cfg.HistoryKeep == 0 {
		cfg.HistoryKeep = DefaultHistoryKeep
	}
	if cfg.PageSize == 0 {
		cfg.PageSize = DefaultPageSize
	}
	if cfg.PreviewLimit == 0 {
		cfg.PreviewLimit = DefaultPreviewLimit
	}
	if cfg.Refresh == 0 {
		cfg.Refresh = DefaultRefresh
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	cfg.AllowedHosts = slices.Clone(cfg.AllowedHosts)
	static, _ := fs.Sub(assets, "assets/static")
	srv := &Server{
		cfg:     cfg,
		static:  http.StripPrefix("/static/", http.FileServerFS(static)),
		history: newHistory(cfg.Window, max(cfg.Window, cfg.HistoryKeep)),
	}
	if st, ok := cfg.Source.(historyStore); ok && !cfg.NoStoredHistory {
		srv.store = st
	}
	pages, err := srv.parsePages()
	if err != nil {
		return nil, err
	}
	srv.pages = pages
	if len(cfg.HealthURLs) > 0 {
		cfg.HealthURLs = slices.Clone(cfg.HealthURLs)
		srv.cfg.HealthURLs = cfg.HealthURLs
		srv.health = newHealthPoller(cfg.HealthURLs, cfg.Now)
	}
	return srv, nil
}

// Start starts the sampler, which records the queues' counts every
// SampleInterval (the first at once) until Close. Starting twice is a
// no-op.
func (s *Server) Start() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.started {
		return
	}
	s.started = true
	ctx, stop := context.WithCancel(context.Background())
	s.stop, s.done = stop, make(chan struct{})
	go s.sample(ctx)
}

// Close stops the sampler and waits for it, at most until ctx is done, and
// drops the idle connections to the health endpoints. It is idempotent and
// safe before Start.
func (s *Server) Close(ctx context.Context) error {
	if s.health != nil {
		s.health.close()
	}
	s.mu.Lock()
	stop, done := s.stop, s.done
	s.mu.Unlock()
	if stop == nil {
		return nil
	}
	stop()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("console: sampler still running: %w", ctx.Err())
	}
}

// checkPrefix reports what is wrong with a Prefix (already without its
// trailing slash).
func checkPrefix(p string) error {
	if p == "" {
		return nil
	}
	if !strings.HasPrefix(p, "/") || strings.ContainsAny(p, "?#%\"\\<>' \x00") || strings.Contains(p, "//") || strings.Contains(p, "/../") || strings.HasSuffix(p, "/..") {
		return fmt.Errorf("Prefix %q must be a clean absolute path such as /ops/berth", p)
	}
	return nil
}

// url returns the console's path p ("/queues", "/deadletters?…") under
// the Prefix.
func (s *Server) url(p string) string { return s.cfg.Prefix + p }

func (s *Server) sample(ctx context.Context) {
	defer close(s.done)
	t := time.NewTicker(s.cfg.SampleInterval)
	defer t.Stop()
	for {
		s.SampleNow(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// SampleNow reads the queues' counts once into the history, as the
// sampler does every SampleInterval.
func (s *Server) SampleNow(ctx context.Context) {
	rctx, cancel := context.WithTimeout(ctx, s.cfg.SampleInterval+5*time.Second)
	defer cancel()
	qs, err := s.cfg.Source.Queues(rctx)
	if err != nil {
		if ctx.Err() == nil {
			s.cfg.Logger.Warn("console: sample queues", "err", err)
		}
		return
	}
	now := s.cfg.Now()
	if s.store == nil {
		s.history.add(now, qs)
		return
	}
	s.storeMu.Lock()
	defer s.storeMu.Unlock()
	if !s.loaded {
		stored, err := s.store.History(rctx, now.Add(-s.cfg.HistoryKeep))
		if err != nil {
			s.cfg.Logger.Warn("console: read the stored history", "err", err)
		} else {
			s.history.load(now, stored)
			s.loaded = true
		}
	}
	s.history.add(now, qs)
	s.recordHistory(rctx, now, qs)
}

// recordHistory writes this minute's samples unless the console is
// read-only or wrote them already. A failure is logged and tried again at
// the next sample. The caller holds storeMu.
func (s *Server) recordHistory(ctx context.Context, now time.Time, qs []inspect.QueueStats) {
	minute := now.Truncate(time.Minute)
	if s.cfg.ReadOnly || !minute.After(s.recorded) {
		return
	}
	if err := s.store.RecordHistory(ctx, now, qs, now.Add(-s.cfg.HistoryKeep)); err != nil {
		s.cfg.Logger.Warn("console: store the history", "err", err)
		return
	}
	s.recorded = minute
}
