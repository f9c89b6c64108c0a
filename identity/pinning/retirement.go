package pinning

import (
	"fmt"
	"math"
	"time"

	"github.com/seed-c8be168e/runtime-watcher/api/contract"
)

// Retirement is contract.Retirement as SAN pinning keeps it for every
// runtime: three Unix times in seconds (24 bytes; X.509 validity has
// second precision), so 100,000 runtimes hold 2.4 MB of it. The zero value
// retires nothing.
type Retirement struct {
	always, issuedBefore, from int64
}

// unreadable is the always of a retirement whose annotation could not be
// read: every certificate is refused (fail closed).
const unreadable = math.MaxInt64

// RetirementOf reads a Kyma's retired-certificates annotation (raw, ""
// when not set). An unreadable value retires every certificate of the
// runtime: fail closed, said in the refusal's message.
func RetirementOf(annotation string) Retirement {
	r, err := contract.ParseRetirement(annotation)
	if err != nil {
		return Retirement{always: unreadable}
	}
	// From is rounded up to the second: never earlier than written.
	return Retirement{always: unix(r.Always, false), issuedBefore: unix(r.IssuedBefore, false), from: unix(r.From, true)}
}

// unix is t in Unix seconds (0 for the zero time), rounded up when up is set.
func unix(t time.Time, up bool) int64 {
	if t.IsZero() {
		return 0
	}
	s := t.Unix()
	if up && t.Nanosecond() > 0 {
		s++
	}
	return s
}

// retired reports whether a certificate valid from notBefore is retired at now.
func (r Retirement) retired(notBefore, now time.Time) bool {
	nb := notBefore.Unix()
	return nb < r.always || nb < r.issuedBefore && now.Unix() >= r.from
}

// String says what is retired, for a refusal's message.
func (r Retirement) String() string {
	if r.always == unreadable {
		return fmt.Sprintf("the Kyma's %s annotation is unreadable, so every certificate is refused", contract.AnnotationRetiredCertificates)
	}
	s := fmt.Sprintf("certificates issued before %s are refused from %s", at(r.issuedBefore), at(r.from))
	if r.always != 0 {
		s += fmt.Sprintf(", those issued before %s already", at(r.always))
	}
	return s
}

func at(sec int64) string { return time.Unix(sec, 0).UTC().Format(time.RFC3339) }
