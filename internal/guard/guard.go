// Package guard runs plug-in code (a logger, an observer, a callback) so
// that a panic in it never takes the process down. Every call Berth makes
// into code it does not own, outside the user's handler, goes through here.
package guard

import "fmt"

// Call runs fn and returns what it panicked with as an error, or nil.
func Call(fn func()) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = PanicError(p)
		}
	}()
	fn()
	return nil
}

// Do runs fn and ignores a panic: for logger and observer calls, whose
// failure must cost nothing but the log line or the metric.
func Do(fn func()) {
	defer func() { _ = recover() }()
	fn()
}

// Run runs fn and returns its error, or a panic turned into an error.
func Run(fn func() error) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = PanicError(p)
		}
	}()
	return fn()
}

// PanicError turns a recovered value into an error, keeping an error's
// chain (so errors.Is still sees it).
func PanicError(p any) error {
	if err, ok := p.(error); ok {
		return fmt.Errorf("panic: %w", err)
	}
	return fmt.Errorf("panic: %v", p)
}
