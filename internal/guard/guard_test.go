package guard

import (
	"errors"
	"testing"
)

func TestCallRecovers(t *testing.T) {
	if err := Call(func() { panic("boom") }); err == nil || err.Error() != "panic: boom" {
		t.Fatalf("Call = %v", err)
	}
	if err := Call(func() {}); err != nil {
		t.Fatalf("Call of a quiet func = %v", err)
	}
}

func TestRunKeepsChain(t *testing.T) {
	sentinel := errors.New("sentinel")
	if err := Run(func() error { panic(sentinel) }); !errors.Is(err, sentinel) {
		t.Fatalf("Run = %v, want it to wrap the sentinel", err)
	}
	if err := Run(func() error { return sentinel }); err != sentinel {
		t.Fatalf("Run = %v, want the returned error", err)
	}
}

func TestDoSwallows(t *testing.T) {
	ran := false
	Do(func() { ran = true; panic("x") })
	if !ran {
		t.Fatal("Do did not run fn")
	}
}
