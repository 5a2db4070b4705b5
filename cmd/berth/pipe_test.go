package main

import (
	"bufio"
	"io"
	"strings"
	"testing"
	"time"
)

// linePipe delivers written lines to a test that waits for one.
type linePipe struct {
	lines chan string
}

func newPipe() (*linePipe, *io.PipeWriter) {
	r, w := io.Pipe()
	p := &linePipe{lines: make(chan string, 1024)}
	go func() {
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			select {
			case p.lines <- sc.Text():
			default:
			}
		}
		_, _ = io.Copy(io.Discard, r)
		close(p.lines)
	}()
	return p, w
}

func (p *linePipe) waitFor(t *testing.T, prefix string) string {
	t.Helper()
	timeout := time.After(30 * time.Second)
	for {
		select {
		case l, ok := <-p.lines:
			if !ok {
				t.Fatalf("output ended before a line starting %q", prefix)
			}
			if strings.HasPrefix(l, prefix) {
				go func() {
					for range p.lines {
					}
				}()
				return l
			}
		case <-timeout:
			t.Fatalf("no line starting %q within 30s", prefix)
		}
	}
}
