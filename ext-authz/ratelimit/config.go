package ratelimit

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
)

// DefaultClassLabel is the Kyma label ext-authz reads a runtime's class
// from by default (--rate-limit-class-label): the label Kyma Environment
// Broker sets on every Kyma CR with its service plan (trial, free, aws,
// azure, ...).
const DefaultClassLabel = "kyma-project.io/broker-plan-name"

// Bounds of a Limit.
const (
	MinRate  = 0.001
	MaxRate  = 1e6
	MaxBurst = 1_000_000
	// MaxClasses bounds --rate-limit-classes.
	MaxClasses = 64
)

// Validate checks the ranges: Rate from MinRate to MaxRate per second,
// Burst from 1 to MaxBurst.
func (l Limit) Validate() error {
	if math.IsNaN(l.Rate) || l.Rate < MinRate || l.Rate > MaxRate {
		return fmt.Errorf("rate %v: want %v to %v per second", l.Rate, MinRate, MaxRate)
	}
	if l.Burst < 1 || l.Burst > MaxBurst {
		return fmt.Errorf("burst %d: want 1 to %d", l.Burst, MaxBurst)
	}
	return nil
}

// String is the Limit as ParseLimit reads it.
func (l Limit) String() string {
	return strconv.FormatFloat(l.Rate, 'g', -1, 64) + "/" + strconv.Itoa(l.Burst)
}

// ParseLimit reads "<rate>/<burst>": requests per second (a decimal
// number) and the burst (an integer), e.g. "100/10000".
func ParseLimit(s string) (Limit, error) {
	rate, burst, ok := strings.Cut(s, "/")
	if !ok {
		return Limit{}, fmt.Errorf("%q: want <rate per second>/<burst>, e.g. 100/10000", s)
	}
	r, err := strconv.ParseFloat(rate, 64)
	if err != nil {
		return Limit{}, fmt.Errorf("%q: rate: %w", s, err)
	}
	b, err := strconv.Atoi(burst)
	if err != nil {
		return Limit{}, fmt.Errorf("%q: burst: %w", s, err)
	}
	l := Limit{Rate: r, Burst: b}
	if err := l.Validate(); err != nil {
		return Limit{}, fmt.Errorf("%q: %w", s, err)
	}
	return l, nil
}

// ParseClasses reads --rate-limit-classes: comma-separated
// "<class>=<rate>/<burst>", a class being a Kubernetes label value (not
// empty), each named once, at most MaxClasses; "" is none.
func ParseClasses(s string) (map[string]Limit, error) {
	out := map[string]Limit{}
	if strings.TrimSpace(s) == "" {
		return out, nil
	}
	for _, part := range strings.Split(s, ",") {
		name, lim, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok {
			return nil, fmt.Errorf("%q: want <class>=<rate>/<burst>", part)
		}
		if name == "" {
			return nil, fmt.Errorf("%q: empty class", part)
		}
		if errs := validation.IsValidLabelValue(name); len(errs) > 0 {
			return nil, fmt.Errorf("class %q: %s", name, strings.Join(errs, "; "))
		}
		if _, dup := out[name]; dup {
			return nil, fmt.Errorf("class %q named twice", name)
		}
		if len(out) == MaxClasses {
			return nil, fmt.Errorf("more than %d classes", MaxClasses)
		}
		l, err := ParseLimit(lim)
		if err != nil {
			return nil, fmt.Errorf("class %q: %w", name, err)
		}
		out[name] = l
	}
	return out, nil
}
