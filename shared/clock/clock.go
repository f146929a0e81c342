// Package clock is the injected time source: use cases and adapters take a
// Clock instead of calling time.Now, so tests control time.
package clock

import "time"

// Clock tells the time.
type Clock interface {
	Now() time.Time
}

// System is the wall clock, in UTC.
type System struct{}

// Now returns the current UTC time.
func (System) Now() time.Time { return time.Now().UTC() }
