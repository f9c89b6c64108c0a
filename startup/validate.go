package startup

import (
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// A binary validates its configuration in one function that collects every
// problem (cert-manager's validation.go is the model): a field.ErrorList
// whose paths are the flags (Flag), built with field's constructors
// (field.Invalid, field.Required, field.NotSupported) and the checks below.
// Its parse function returns the list's aggregate (ToAggregate, nil when
// empty); Main prints every problem on a line of its own and exits
// ExitUsageError.

// Flag is the path of flag name in a field.Error: "--name".
func Flag(name string) *field.Path { return field.NewPath("--" + name) }

// Collect appends the problems of checks (nil: none) to errs.
func Collect(errs field.ErrorList, checks ...*field.Error) field.ErrorList {
	for _, e := range checks {
		if e != nil {
			errs = append(errs, e)
		}
	}
	return errs
}

// DNSLabel: value must be a DNS-1123 label (a namespace, a manager or
// module name).
func DNSLabel(flag, value string) *field.Error {
	if errs := validation.IsDNS1123Label(value); len(errs) > 0 {
		return field.Invalid(Flag(flag), value, strings.Join(errs, "; "))
	}
	return nil
}

// Positive: d must be more than zero.
func Positive(flag string, d time.Duration) *field.Error {
	if d <= 0 {
		return field.Invalid(Flag(flag), d.String(), "must be positive")
	}
	return nil
}

// NotNegative: d must be zero or more.
func NotNegative(flag string, d time.Duration) *field.Error {
	if d < 0 {
		return field.Invalid(Flag(flag), d.String(), "must not be negative")
	}
	return nil
}

// DurationRange: d must be in [lo, hi].
func DurationRange(flag string, d, lo, hi time.Duration) *field.Error {
	if d < lo || d > hi {
		return field.Invalid(Flag(flag), d.String(), "must be from "+lo.String()+" to "+hi.String())
	}
	return nil
}

// IntRange: v must be in [lo, hi].
func IntRange(flag string, v, lo, hi int) *field.Error {
	if v < lo || v > hi {
		return field.Invalid(Flag(flag), v, "must be from "+strconv.Itoa(lo)+" to "+strconv.Itoa(hi))
	}
	return nil
}

// OneOf: value must be one of allowed.
func OneOf(flag, value string, allowed ...string) *field.Error {
	for _, a := range allowed {
		if value == a {
			return nil
		}
	}
	return field.NotSupported(Flag(flag), value, allowed)
}

// Together: flags a and b are both set or both empty.
func Together(a, av, b, bv string) *field.Error {
	if (av == "") != (bv == "") {
		return field.Required(Flag(a), "--"+a+" and --"+b+" go together")
	}
	return nil
}

// Problems are the single problems of an error: the errors of a
// field.ErrorList's aggregate or of errors.Join, else err itself.
func Problems(err error) []error {
	if err == nil {
		return nil
	}
	if m, ok := err.(interface{ Unwrap() []error }); ok {
		return m.Unwrap()
	}
	if a, ok := err.(interface{ Errors() []error }); ok {
		return a.Errors()
	}
	return []error{err}
}
