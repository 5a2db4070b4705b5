package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/berth-go/berth/console"
)

func consoleCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("berth console", "berth console --url URL [--addr 127.0.0.1:8080] [--read-only] [--health-url URL]...", `
Serves a web console for the deployment of a transport URL (postgres://,
sqlite://, sqlserver://, sqs://): every queue's counts with their
history (on SQL a day of it, one sample a minute kept in the database by
read-write consoles), and the dead letters to browse, replay and
delete. The pages and a JSON API (/api/queues, /api/deadletters, …) are
served from this binary.

The Fleet page lists the running listeners: on SQL transports those that
report to the fleet tables (fleet_interval), and on any transport (on SQS
the only way) those of the services whose health endpoints are given with
--health-url (repeatable; a health.Handler's report, such as
http://svc:8081/healthz), read when the page loads, each within 2s; a
service that does not answer shows as unreachable.

Credentials come from the environment: BERTH_CONSOLE_TOKEN (sent as
"Authorization: Bearer TOKEN"), and/or BERTH_CONSOLE_USER with
BERTH_CONSOLE_PASSWORD (HTTP basic authentication, for browsers). Without
them the console only listens on a loopback address. --read-only hides
every action and the API refuses them.`, stderr)
	u := fs.String("url", envURL(), "transport URL; default $BERTH_URL")
	addr := fs.String("addr", "127.0.0.1:8080", "listen address (host:port)")
	readOnly := fs.Bool("read-only", false, "no replay or delete")
	sample := fs.Duration("sample", console.DefaultSampleInterval, "how often to sample the queues' counts")
	var healthURLs multi
	fs.Var(&healthURLs, "health-url", "a service's health endpoint for the Fleet page, such as http://svc:8081/healthz (repeatable)")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usagef("unexpected argument %q", pos[0])
	}
	if err := requireURL(*u); err != nil {
		return err
	}
	if pu, err := url.Parse(*u); err == nil && pu.Scheme == "mem" {
		return usagef("mem:// queues live inside one process: there is nothing for a console to open (use postgres://, sqlite://, sqlserver:// or sqs://)")
	}
	if *sample < time.Second {
		return usagef("--sample must be at least 1s, got %s", *sample)
	}
	for _, h := range healthURLs {
		if err := console.CheckHealthURL(h); err != nil {
			return usagef("--health-url %s", err)
		}
	}
	auth := console.AuthFromEnv(os.Getenv)
	if err := console.CheckListen(*addr, auth); err != nil {
		return usagef("%s", strings.TrimPrefix(err.Error(), "console: "))
	}
	d, err := console.Open(ctx, *u)
	if err != nil {
		return err
	}
	defer d.Close()
	kind := d.Kind
	srv, err := console.New(console.Config{
		Source: d.Source, Kind: kind, ReadOnly: *readOnly, Auth: auth, SampleInterval: *sample,
		HealthURLs: healthURLs,
		Logger:     slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	})
	if err != nil {
		return usagef("%s", errorText(err))
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return err
	}
	hs := &http.Server{Handler: srv.Handler(), ReadHeaderTimeout: 10 * time.Second}
	srv.Start()
	mode := ""
	if *readOnly {
		mode = " (read-only)"
	}
	fmt.Fprintf(stdout, "berth console: %s at http://%s/%s\n", kind, ln.Addr(), mode)
	served := make(chan error, 1)
	go func() { served <- hs.Serve(ln) }()
	var serveErr error
	select {
	case serveErr = <-served:
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	err = errors.Join(hs.Shutdown(sctx), srv.Close(sctx))
	if serveErr == nil {
		serveErr = <-served
	}
	if errors.Is(serveErr, http.ErrServerClosed) {
		serveErr = nil
	}
	return errors.Join(serveErr, err)
}
