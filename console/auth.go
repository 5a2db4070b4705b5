package console

import (
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
)

// Environment variables the berth command reads the credentials from.
const (
	EnvToken    = "BERTH_CONSOLE_TOKEN"
	EnvUser     = "BERTH_CONSOLE_USER"
	EnvPassword = "BERTH_CONSOLE_PASSWORD"
)

// ErrInsecureAddr is returned by CheckListen for a non-loopback address
// without credentials.
var ErrInsecureAddr = errors.New("console: refusing to listen on a non-loopback address without credentials")

// Auth is the credentials the console requires. With neither set, every
// request is let in (loopback only: see CheckListen).
type Auth struct {
	// Token, when set, is accepted as "Authorization: Bearer TOKEN".
	Token string
	// User and Password, when set (both), are accepted as HTTP basic
	// authentication.
	User, Password string
}

// Enabled reports whether any credential is configured.
func (a Auth) Enabled() bool { return a.Token != "" || a.User != "" }

func (a Auth) check() error {
	if (a.User == "") != (a.Password == "") {
		return errors.New("Auth: User and Password go together")
	}
	return nil
}

// AuthFromEnv reads the credentials from BERTH_CONSOLE_TOKEN,
// BERTH_CONSOLE_USER and BERTH_CONSOLE_PASSWORD through getenv.
func AuthFromEnv(getenv func(string) string) Auth {
	return Auth{Token: getenv(EnvToken), User: getenv(EnvUser), Password: getenv(EnvPassword)}
}

// CheckListen returns ErrInsecureAddr when addr (host:port) is not a
// loopback address and auth has no credentials. An empty host (all
// interfaces) and names other than localhost are not loopback.
func CheckListen(addr string, auth Auth) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("console: address %q: %w", addr, err)
	}
	if auth.Enabled() {
		return nil
	}
	if host == "localhost" {
		return nil
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		return nil
	}
	return fmt.Errorf("%w: %s (set %s, or %s and %s)", ErrInsecureAddr, addr, EnvToken, EnvUser, EnvPassword)
}

func same(a, b string) bool {
	ha, hb := sha256.Sum256([]byte(a)), sha256.Sum256([]byte(b))
	return subtle.ConstantTimeCompare(ha[:], hb[:]) == 1
}

// allowed reports whether r carries the configured credentials.
func (a Auth) allowed(r *http.Request) bool {
	if !a.Enabled() {
		return true
	}
	// The scheme is case-insensitive (RFC 7235, section 2.1).
	scheme, tok, _ := strings.Cut(r.Header.Get("Authorization"), " ")
	if strings.EqualFold(scheme, "Bearer") && a.Token != "" {
		return same(strings.TrimLeft(tok, " "), a.Token)
	}
	if u, p, ok := r.BasicAuth(); ok && a.User != "" {
		return same(u, a.User) && same(p, a.Password)
	}
	return false
}

// guard requires the credentials, and refuses cross-site writes: a browser
// that holds basic credentials sends them with any site's form, so a POST
// must come from the console's own pages (Sec-Fetch-Site, else Origin).
// Without credentials it also refuses, with 421, every request whose Host
// is not a loopback IP, localhost or the address the connection came in
// on: a page of a domain rebound to 127.0.0.1 (DNS rebinding) is
// same-origin with the console as far as the browser knows, but it still
// sends its own name as Host.
func (s *Server) guard(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !s.cfg.Auth.Enabled() && !localHost(r) && !s.allowedHost(r) {
			http.Error(w, fmt.Sprintf("421 misdirected request: Host %.100q is not this console's address; without credentials it answers only to a loopback address or localhost (see docs/console.md, Authentication)", r.Host), http.StatusMisdirectedRequest)
			return
		}
		if !s.cfg.Auth.allowed(r) {
			if s.cfg.Auth.User != "" {
				w.Header().Set("WWW-Authenticate", `Basic realm="berth console", charset="UTF-8"`)
			} else {
				w.Header().Set("WWW-Authenticate", `Bearer realm="berth console"`)
			}
			http.Error(w, "401 unauthorized: this console needs credentials", http.StatusUnauthorized)
			return
		}
		if r.Method != http.MethodGet && r.Method != http.MethodHead && !sameOrigin(r) {
			http.Error(w, "403 forbidden: cross-site request", http.StatusForbidden)
			return
		}
		w.Header().Set("X-Content-Type-Options", "nosniff")
		w.Header().Set("X-Frame-Options", "DENY")
		w.Header().Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; frame-ancestors 'none'")
		w.Header().Set("Referrer-Policy", "same-origin")
		next.ServeHTTP(w, r)
	})
}

// allowedHost reports whether r's Host (its port aside) is one of
// Config.AllowedHosts, or they hold "*".
func (s *Server) allowedHost(r *http.Request) bool {
	h := hostOnly(r.Host)
	for _, a := range s.cfg.AllowedHosts {
		if a == "*" || strings.EqualFold(strings.Trim(a, "[]"), h) {
			return true
		}
	}
	return false
}

func hostOnly(h string) string {
	if hh, _, err := net.SplitHostPort(h); err == nil {
		return hh
	}
	return strings.TrimSuffix(strings.TrimPrefix(h, "["), "]")
}

// localHost reports whether r's Host (its port aside) is a loopback IP,
// localhost, or the IP the connection arrived on: names a browser never
// asks a DNS server for, so no other site can rebind them.
func localHost(r *http.Request) bool {
	h := hostOnly(r.Host)
	if strings.EqualFold(h, "localhost") {
		return true
	}
	ip := net.ParseIP(h)
	if ip == nil {
		return false
	}
	if ip.IsLoopback() {
		return true
	}
	la, _ := r.Context().Value(http.LocalAddrContextKey).(*net.TCPAddr)
	return la != nil && la.IP.Equal(ip)
}

// scheme is the scheme the browser used to reach the console: https behind
// TLS, or when a proxy in front says so (X-Forwarded-Proto, which no other
// site's page can set on a request the browser sends without a CORS
// preflight, and the console answers no preflight), else http.
func scheme(r *http.Request) string {
	switch p := strings.ToLower(r.Header.Get("X-Forwarded-Proto")); {
	case r.TLS != nil:
		return "https"
	case p == "https" || p == "http":
		return p
	}
	return "http"
}

func sameOrigin(r *http.Request) bool {
	switch r.Header.Get("Sec-Fetch-Site") {
	case "same-origin", "none":
		return true
	case "":
	default:
		return false
	}
	o := r.Header.Get("Origin")
	if o == "" {
		return true // not a browser's cross-site form: scripts, curl
	}
	u, err := url.Parse(o)
	return err == nil && u.Scheme == scheme(r) && strings.EqualFold(u.Host, r.Host)
}
