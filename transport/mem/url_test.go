package mem_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/berth-go/berth/receiver"
	"github.com/berth-go/berth/transport"
)

func TestOpenBadInput(t *testing.T) {
	ctx := context.Background()
	cases := []struct {
		url  string
		is   error
		want []string
	}{
		{url: "nosuch://x", is: transport.ErrUnknownScheme, want: []string{`"nosuch"`, "mem"}},
		{url: "://bad url", is: transport.ErrInvalidConfig, want: []string{"malformed URL"}},
		{url: "just-a-name", is: transport.ErrInvalidConfig, want: []string{"no scheme", "mem"}},
		{url: "postgres://user:secret@host:port/db", is: transport.ErrInvalidConfig, want: []string{"malformed URL", "port"}},
		{url: "mem://x?concurrency=zero", is: nil, want: []string{`"concurrency"`, "integer"}},
		{url: "mem://x?wave_cap=0", want: []string{`"wave_cap"`}},
		{url: "mem://x?empty_delay=soon", want: []string{`"empty_delay"`, "duration"}},
		{url: "mem://x?concurency=4", want: []string{"unknown parameter", "concurency", "concurrency"}},
		{url: "mem://x?max_queue=10&restart_queue=20", is: transport.ErrInvalidConfig, want: []string{"RestartQueue"}},
	}
	for _, c := range cases {
		t.Run(c.url, func(t *testing.T) {
			sub, err := transport.OpenSubscriber(ctx, c.url)
			if err == nil {
				_ = sub.Close()
				t.Fatalf("OpenSubscriber(%q) succeeded", c.url)
			}
			if c.is != nil && !errors.Is(err, c.is) {
				t.Fatalf("err = %v, want errors.Is %v", err, c.is)
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Fatalf("err %q does not mention %q", err, w)
				}
			}
			if strings.Contains(err.Error(), "secret") {
				t.Fatalf("err %q repeats the password", err)
			}
		})
	}
}

func TestConfigErrorsNameEveryField(t *testing.T) {
	err := receiver.Config{Concurrency: -1, BufferSize: -2, MaxQueue: -3, DrainTimeout: -1}.Validate()
	if !errors.Is(err, transport.ErrInvalidConfig) {
		t.Fatalf("err = %v", err)
	}
	for _, f := range []string{"Concurrency", "BufferSize", "MaxQueue", "DrainTimeout"} {
		if !strings.Contains(err.Error(), f) {
			t.Errorf("error does not name %s: %v", f, err)
		}
	}
}
