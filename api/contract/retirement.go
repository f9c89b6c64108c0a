package contract

import (
	"encoding/json"
	"fmt"
	"time"
)

// AnnotationRetiredCertificates on a Kyma CR says which of its runtime's
// client certificates are retired (Retirement, JSON). vs-controller writes it
// once per issuance, after the new certificate reached the runtime's SKR;
// ext-authz (and the listener's in-process pinning) refuse a retired
// certificate with ReasonRevoked (docs/architecture.md §4.9).
const AnnotationRetiredCertificates = "operator.kyma-project.io/retired-certificates"

// RevokeCertificateAnnotation on a runtime's Certificate in the KCP asks
// vs-controller to revoke the runtime's current client certificate: a new
// one is issued and delivered to the SKR, and from then on every older one
// is refused (docs/operations.md, "A runtime's key leaked"). Its value is
// free text (a ticket, a reason); vs-controller removes the annotation once
// the revocation is in effect.
const RevokeCertificateAnnotation = "operator.kyma-project.io/revoke-certificate"

// maxRetirementBytes bounds the annotation value read: three RFC 3339
// times in JSON are well under it.
const maxRetirementBytes = 512

// Retirement is the value of AnnotationRetiredCertificates. A certificate
// whose NotBefore is before Always is refused; one whose NotBefore is before
// IssuedBefore is refused from From on. IssuedBefore is the NotBefore of the
// runtime's current certificate, so that one and newer ones stay good; From
// is the end of the overlap in which the previous certificate stays good
// after a renewal (the time the new one reached the SKR for a revocation);
// Always is the IssuedBefore of the retirement this one followed, already in
// effect when it was written.
type Retirement struct {
	IssuedBefore time.Time `json:"issuedBefore"`
	From         time.Time `json:"from"`
	Always       time.Time `json:"always,omitzero"`
}

// Retired reports whether a certificate valid from notBefore is retired at now.
func (r Retirement) Retired(notBefore, now time.Time) bool {
	return notBefore.Before(r.Always) || notBefore.Before(r.IssuedBefore) && !now.Before(r.From)
}

// InEffect reports whether everything IssuedBefore is refused at now.
func (r Retirement) InEffect(now time.Time) bool { return !now.Before(r.From) }

// String is the annotation value.
func (r Retirement) String() string {
	r.IssuedBefore, r.From, r.Always = r.IssuedBefore.UTC(), r.From.UTC(), r.Always.UTC()
	b, _ := json.Marshal(r) // three times always marshal
	return string(b)
}

// ParseRetirement reads an AnnotationRetiredCertificates value. An empty
// value is no retirement (the zero Retirement, which retires nothing).
func ParseRetirement(v string) (Retirement, error) {
	var r Retirement
	if v == "" {
		return r, nil
	}
	if len(v) > maxRetirementBytes {
		return r, fmt.Errorf("%s: longer than %d bytes", AnnotationRetiredCertificates, maxRetirementBytes)
	}
	if err := json.Unmarshal([]byte(v), &r); err != nil {
		return Retirement{}, fmt.Errorf("%s: %w", AnnotationRetiredCertificates, err)
	}
	return r, nil
}
