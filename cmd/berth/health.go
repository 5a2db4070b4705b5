package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/berth-go/berth/health"
)

// errUnhealthy is returned when the queried service is not healthy.
type errUnhealthy struct{ status string }

func (e errUnhealthy) Error() string { return "service is " + e.status }

func healthCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("berth health", "berth health --addr http://host:port[/path] [--json]", `
Queries a running service's Berth health endpoint (package health) and prints
a short per-listener table. Exits 0 when the service is healthy or degraded
(200), 1 when it is unhealthy (503) or cannot be reached. With no path,
/healthz is asked; give /readyz or /livez (or any prefix ending in them) to
check readiness or liveness instead.`, stderr)
	addr := fs.String("addr", "", "health endpoint, e.g. http://127.0.0.1:8081 or http://host:8081/berth/readyz")
	timeout := fs.Duration("timeout", 5*time.Second, "request timeout")
	asJSON := fs.Bool("json", false, "print the report JSON as served")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) == 1 && *addr == "" {
		*addr = pos[0]
	} else if len(pos) > 0 {
		return usagef("unexpected argument %q", pos[0])
	}
	if *addr == "" {
		return usagef("--addr is required")
	}
	u, err := url.Parse(*addr)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return usagef("--addr %q: want an http:// or https:// URL such as http://127.0.0.1:8081", *addr)
	}
	if u.Path == "" || u.Path == "/" {
		u.Path = "/healthz"
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("cannot reach %s: %w", u, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
	if err != nil {
		return fmt.Errorf("read %s: %w", u, err)
	}
	var r health.Report
	if err := json.Unmarshal(body, &r); err != nil {
		return fmt.Errorf("%s answered %s, not a Berth health report: %w", u, resp.Status, err)
	}
	if *asJSON {
		fmt.Fprintf(stdout, "%s\n", strings.TrimSpace(string(body)))
	} else {
		printReport(stdout, u.String(), resp.StatusCode, r)
	}
	if resp.StatusCode != http.StatusOK {
		return errUnhealthy{fmt.Sprintf("%s (%s answered %s)", r.Health, u.Path, resp.Status)}
	}
	return nil
}

func printReport(w io.Writer, at string, code int, r health.Report) {
	fmt.Fprintf(w, "%s: %s (HTTP %d), live %v, ready %v\n", at, r.Health, code, r.Live, r.Ready)
	if len(r.Listeners) > 0 {
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "SOURCE\tLISTENER\tHEALTH\tREASON\tSTATUS\tQUEUE\tWAVE\tREBUILDS\tLAST ERROR")
		for _, l := range r.Listeners {
			errText := l.LastError
			if l.Fault != nil && l.Faulted {
				errText = l.Fault.Cause
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%d\t%d\t%s\n", l.Source, l.Name, l.Health, l.Reason, l.Status, l.QueueCount, l.Wave, l.Rebuilds, oneLine(errText, 60))
		}
		_ = tw.Flush()
	} else {
		fmt.Fprintln(w, "no listeners")
	}
	for _, p := range r.Pings {
		line := fmt.Sprintf("ping %s: %s", p.Name, p.Health)
		if p.Error != "" {
			line += ": " + oneLine(p.Error, 80)
		}
		fmt.Fprintln(w, line)
	}
}
