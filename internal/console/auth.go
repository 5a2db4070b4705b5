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
	h := r.Header.Get("Authorization")
	if tok, ok := strings.CutPrefix(h, "Bearer "); ok && a.Token != "" {
		return same(tok, a.Token)
	}
	if u, p, ok := r.BasicAuth(); ok && a.User != "" {
		return same(u, a.User) && same(p, a.Password)
	}
	return false
}

// guard requires the credentials, and refuses cross-site writes: a browser
// that holds basic credentials sends them with any site's form, so a POST
// must come from the console's own pages (Sec-Fetch-Site, else Origin).
func (s *Server) guard(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
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
	return err == nil && u.Host == r.Host
}
