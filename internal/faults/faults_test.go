package faults

import (
	"errors"
	"testing"
)

func TestNoInjectorIsANoop(t *testing.T) {
	for _, p := range Points {
		if err := Hit(p); err != nil {
			t.Fatalf("Hit(%s) = %v without an injector", p, err)
		}
	}
}

func TestPanicErrorSkipAndCounts(t *testing.T) {
	boom := errors.New("boom")
	i := New().Panic(Map, 1).Error(Ack, boom, 2).Skip(Ack, 1)
	defer Install(i)()

	func() {
		defer func() {
			r := recover()
			if inj, ok := r.(*Injected); !ok || inj.Point != Map {
				t.Fatalf("recovered %v, want *Injected at map", r)
			}
		}()
		_ = Hit(Map)
	}()
	if err := Hit(Map); err != nil {
		t.Fatal("the panic rule was for one hit only")
	}
	if err := Hit(Ack); err != nil {
		t.Fatal("the first ack hit is skipped")
	}
	for range 2 {
		if err := Hit(Ack); !errors.Is(err, boom) {
			t.Fatalf("Hit(ack) = %v, want boom", err)
		}
	}
	if err := Hit(Ack); err != nil {
		t.Fatal("the error rule was for two hits")
	}
	if i.Hits(Map) != 1 || i.Hits(Ack) != 2 {
		t.Fatalf("hits map=%d ack=%d", i.Hits(Map), i.Hits(Ack))
	}
}
