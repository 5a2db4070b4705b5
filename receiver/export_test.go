package receiver

import (
	"context"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/berth-go/berth/transport"
)

// Pipe is the stage interface the listener drives, for tests that
// substitute a stage.
type Pipe = pipe

// StageParams is what a test gives NewStage.
type StageParams struct {
	Source   transport.Source
	Config   Config
	Out      chan *message.Message // nil: NewStage makes one
	Context  context.Context
	Pending  *Pending
	OnChange func()
	Logger   watermill.LoggerAdapter
	Name     string
}

// Stage is a stage under test with its channel.
type Stage struct {
	Pipe
	Out <-chan *message.Message
	s   *stage
}

// Holding returns the deliveries user code holds.
func (s Stage) Holding() int { return s.s.holdingCount() }

// Permits returns the concurrency permits and the settle slots in use.
func (s Stage) Permits() (permits, slots int) { return len(s.s.permits), len(s.s.settling) }

// NewStage builds a stage as a listener does.
func NewStage(p StageParams) (Stage, error) {
	if err := p.Config.Validate(); err != nil {
		return Stage{}, err
	}
	o := newOutbox()
	if p.Out != nil {
		o.ch = p.Out
	}
	r, err := newStage(stageParams{Source: p.Source, Config: p.Config.WithDefaults(), Out: o, Context: p.Context,
		Pending: p.Pending, OnChange: p.OnChange, Logger: p.Logger, Name: p.Name})
	if err != nil {
		return Stage{}, err
	}
	return Stage{Pipe: r, Out: o.ch, s: r.(*stage)}, nil
}

// NewListenerWith is NewListener with a stage factory of the test's own;
// newStage(p) is the real one.
func NewListenerWith(cfg ListenerConfig, factory func(newStage func() (Pipe, error)) (Pipe, error)) (*Listener, error) {
	l, err := NewListener(cfg)
	if err != nil {
		return nil, err
	}
	l.newPipe = func(p stageParams) (pipe, error) {
		return factory(func() (Pipe, error) { return newStage(p) })
	}
	return l, nil
}

// Pending returns the listener's batching-pending counter.
func (l *Listener) Pending() *Pending { return l.pending }
