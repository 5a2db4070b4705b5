package console_test

import (
	"context"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"time"

	"github.com/berth-go/berth/console"
)

// A service mounts the console under /ops/berth/ of its own mux, behind
// its own authentication, and leaves the console's health endpoint open
// for its load balancer.
func Example_mount() {
	dir, _ := os.MkdirTemp("", "berth-example")
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "queues.db")
	_ = os.WriteFile(path, nil, 0o600) // the service's database; Open creates nothing

	ctx := context.Background()
	d, err := console.Open(ctx, "sqlite://"+path)
	if err != nil {
		log.Fatal(err)
	}
	defer d.Close()
	srv, err := console.New(console.Config{
		Source: d.Source,
		Kind:   d.Kind,
		Prefix: "/ops/berth",
		// The names the service is reached by; the service authenticates.
		AllowedHosts: []string{"svc.example.com"},
	})
	if err != nil {
		log.Fatal(err)
	}
	srv.Start() // samples the history
	defer func() {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		_ = srv.Close(cctx)
	}()

	staffOnly := func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if u, p, ok := r.BasicAuth(); !ok || u != "ops" || p != "secret" {
				http.Error(w, "log in", http.StatusUnauthorized)
				return
			}
			next.ServeHTTP(w, r)
		})
	}
	mux := http.NewServeMux()
	mux.Handle("GET /ops/berth/healthz", srv.Handler())
	mux.Handle("/ops/berth/", staffOnly(srv.Handler()))
	hs := httptest.NewServer(mux)
	defer hs.Close()

	for _, tc := range []struct {
		path string
		auth bool
	}{{"/ops/berth/healthz", false}, {"/ops/berth/queues", false}, {"/ops/berth/queues", true}} {
		req, _ := http.NewRequest("GET", hs.URL+tc.path, nil)
		req.Host = "svc.example.com"
		if tc.auth {
			req.SetBasicAuth("ops", "secret")
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			log.Fatal(err)
		}
		res.Body.Close()
		fmt.Println(tc.path, "logged in:", tc.auth, "→", res.StatusCode)
	}
	// Output:
	// /ops/berth/healthz logged in: false → 200
	// /ops/berth/queues logged in: false → 401
	// /ops/berth/queues logged in: true → 200
}
