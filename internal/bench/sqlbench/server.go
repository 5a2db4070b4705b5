package sqlbench

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"
)

// clockTicks is USER_HZ, the unit of utime and stime in /proc/PID/stat: 100
// on every Linux architecture Go supports.
const clockTicks = 100

// procTimes is one /proc/PID/stat reading.
type procTimes struct {
	ppid   int
	self   int64 // utime + stime, in ticks
	reaped int64 // cutime + cstime: children waited for
}

// readProcStat parses /proc/PID/stat content. The command may contain spaces
// and parentheses, so fields are counted from the last ')'.
func readProcStat(b []byte) (procTimes, error) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return procTimes{}, errors.New("no ')' in stat")
	}
	f := bytes.Fields(b[i+1:])
	// f[0] is field 3 (state); utime is field 14, so f[11].
	if len(f) < 15 {
		return procTimes{}, fmt.Errorf("stat has %d fields after the command", len(f))
	}
	num := func(k int) int64 {
		n, _ := strconv.ParseInt(string(f[k]), 10, 64)
		return n
	}
	return procTimes{
		ppid:   int(num(1)),
		self:   num(11) + num(12),
		reaped: num(13) + num(14),
	}, nil
}

// serverCPU measures the CPU time of a local PostgreSQL server from /proc:
// the postmaster (including the backends it has reaped, cutime + cstime)
// plus every live child process (backends, autovacuum, WAL writer, …).
// Processes listed in exclude (the publisher's and the harness's own
// backends) are taken out.
type serverCPU struct {
	postmaster int

	mu      sync.Mutex
	exclude map[int]bool
}

// newServerCPU finds the postmaster of the server db is connected to. It
// fails when the server is not on this machine (or /proc is not readable).
func newServerCPU(ctx context.Context, db *sql.DB) (*serverCPU, error) {
	var pid int
	if err := db.QueryRowContext(ctx, `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
		return nil, err
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return nil, fmt.Errorf("server not local: %w", err)
	}
	t, err := readProcStat(b)
	if err != nil {
		return nil, err
	}
	comm, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", t.ppid))
	if err != nil || !bytes.Contains(comm, []byte("postgres")) {
		return nil, fmt.Errorf("backend %d's parent %d is not a postgres postmaster", pid, t.ppid)
	}
	return &serverCPU{postmaster: t.ppid, exclude: map[int]bool{}}, nil
}

// Exclude leaves a backend out of the measurement.
func (s *serverCPU) Exclude(pid int) {
	s.mu.Lock()
	s.exclude[pid] = true
	s.mu.Unlock()
}

// Quiesce waits (up to timeout) until no client backend of the server is
// alive but the excluded ones, so that a Sample counts every backend of a
// finished run whole: a backend that exits between the reading of the
// postmaster's reaped total and the listing of live children would
// otherwise be counted in neither.
func (s *serverCPU) Quiesce(timeout time.Duration) {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) && s.liveClients() > 0 {
		time.Sleep(20 * time.Millisecond) // polling /proc, nothing to wait on
	}
}

// liveClients counts the postmaster's children that serve a client
// connection (their command line names the client's address) and are not
// excluded.
func (s *serverCPU) liveClients() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	n := 0
	for _, d := range dirs {
		b, err := os.ReadFile(d + "/stat")
		if err != nil {
			continue
		}
		t, err := readProcStat(b)
		if err != nil || t.ppid != s.postmaster {
			continue
		}
		pid, _ := strconv.Atoi(filepath.Base(d))
		if s.exclude[pid] {
			continue
		}
		cmd, _ := os.ReadFile(d + "/cmdline")
		if bytes.Contains(cmd, []byte("[local]")) || bytes.Contains(cmd, []byte(")")) && bytes.Contains(cmd, []byte("(")) {
			n++
		}
	}
	return n
}

// cpuSample is one measurement: the server total and each excluded
// process's own time, in ticks.
type cpuSample struct {
	total    int64
	excluded map[int]int64
}

// Sample reads the current totals.
func (s *serverCPU) Sample() (cpuSample, error) {
	s.mu.Lock()
	exclude := make(map[int]bool, len(s.exclude))
	for pid := range s.exclude {
		exclude[pid] = true
	}
	s.mu.Unlock()
	out := cpuSample{excluded: map[int]int64{}}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", s.postmaster))
	if err != nil {
		return out, fmt.Errorf("postmaster %d: %w", s.postmaster, err)
	}
	pm, err := readProcStat(b)
	if err != nil {
		return out, err
	}
	out.total = pm.self + pm.reaped
	dirs, err := filepath.Glob("/proc/[0-9]*")
	if err != nil {
		return out, err
	}
	for _, d := range dirs {
		b, err := os.ReadFile(d + "/stat")
		if err != nil {
			continue // exited meanwhile
		}
		t, err := readProcStat(b)
		if err != nil || t.ppid != s.postmaster {
			continue
		}
		out.total += t.self
		pid, _ := strconv.Atoi(filepath.Base(d))
		if exclude[pid] {
			out.excluded[pid] = t.self
		}
	}
	return out, nil
}

// Since returns the server CPU time used between before and s, minus what
// the excluded processes used. An excluded process that exited in between
// cannot be taken out (its time moved into the postmaster's cutime); the
// harness keeps them alive until the last sample.
func (s cpuSample) Since(before cpuSample) time.Duration {
	ticks := s.total - before.total
	for pid, t := range s.excluded {
		ticks -= t - before.excluded[pid]
	}
	return time.Duration(ticks) * time.Second / clockTicks
}

// statStatements reads pg_stat_statements when the server has it.
type statStatements struct {
	db   *sql.DB // the harness's pool
	user string  // the role whose statements are counted
}

// newStatStatements enables the extension in the database when the server
// preloads it; it returns nil when it cannot be used.
func newStatStatements(ctx context.Context, db *sql.DB, user string) *statStatements {
	var preload string
	if err := db.QueryRowContext(ctx, `SHOW shared_preload_libraries`).Scan(&preload); err != nil ||
		!bytes.Contains([]byte(preload), []byte("pg_stat_statements")) {
		return nil
	}
	if _, err := db.ExecContext(ctx, `CREATE EXTENSION IF NOT EXISTS pg_stat_statements`); err != nil {
		return nil
	}
	return &statStatements{db: db, user: user}
}

// Reset clears the statistics.
func (p *statStatements) Reset(ctx context.Context) error {
	_, err := p.db.ExecContext(ctx, `SELECT pg_stat_statements_reset()`)
	return err
}

// Calls returns the statements the counted role executed in this database
// since Reset.
func (p *statStatements) Calls(ctx context.Context) (int64, error) {
	var n int64
	err := p.db.QueryRowContext(ctx, `SELECT coalesce(sum(calls), 0)::bigint FROM pg_stat_statements
WHERE userid = (SELECT oid FROM pg_roles WHERE rolname = $1)
  AND dbid = (SELECT oid FROM pg_database WHERE datname = current_database())`, p.user).Scan(&n)
	return n, err
}
