package listener

import (
	"context"
	"crypto/x509"
	"errors"
	"net/http"
	"net/textproto"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/seed-c8be168e/runtime-watcher/api/contract"
	"github.com/seed-c8be168e/runtime-watcher/identity"
	"github.com/seed-c8be168e/runtime-watcher/identity/pinning"
)

// authenticator establishes the runtime ID of a request or refuses it.
type authenticator interface {
	authenticate(r *http.Request) (runtimeID string, rej *rejection)
	mode() string
}

// rejection is a refused request: the status, and for identity refusals the
// contract deny reason sent as header and JSON body.
type rejection struct {
	status  int
	reason  contract.DenyReason
	message string
}

// ErrUnauthenticated, returned (or wrapped) by a VerifyFunc, answers 401.
var ErrUnauthenticated = errors.New("unauthenticated")

// ErrUnavailable, returned (or wrapped) by a VerifyFunc, answers 503 with
// Retry-After: the identity cannot be checked now, the sender should retry.
var ErrUnavailable = errors.New("identity verification unavailable")

// VerifyFunc establishes the runtime ID of a request (identity mode c).
// Errors map to statuses: ErrUnauthenticated → 401, ErrUnavailable → 503,
// *identity.Denial → 403 with its reason (401 for missing-client-cert), any
// other error → 403. A nil error with a runtime ID that is neither a DNS-1123
// subdomain nor a label value is refused with 403. The request's context is
// bounded by the verify timeout.
type VerifyFunc func(r *http.Request) (runtimeID string, err error)

// SANVerifier does SAN pinning on an x-forwarded-client-cert header.
// *identity.Verifier implements it (identity mode b).
type SANVerifier interface {
	Verify(ctx context.Context, xfccHeader string, sourceCertPEM string) (identity.Identity, error)
}

// WithRuntimeIDHeader selects identity mode a, the default: the listener runs
// behind the gateway's ext-authz, which verified the client certificate and
// set the x-watcher-runtime-id header (overwriting anything the client sent).
// Requests without a single valid header value get 401.
func WithRuntimeIDHeader() Option {
	return func(c *config) error { c.auth = headerAuth{}; return nil }
}

// WithSANPinning selects identity mode b: the listener verifies the
// x-forwarded-client-cert header itself with the shared SAN-pinning code
// (normally a *identity.Verifier over identity.NewKymaLookup on the manager's
// cache). The header must come from a gateway that terminates mTLS and sets
// it with forwardClientCertDetails: SANITIZE_SET; never expose the listener
// directly in this mode, a certificate alone proves nothing without its key.
// Denials answer 403 with x-watcher-deny-reason and a JSON body (401 when no
// certificate was presented); any other verification error (lookup failed,
// cache not synced, timeout) answers 503 — never allow.
func WithSANPinning(v SANVerifier) Option {
	return func(c *config) error {
		if v == nil {
			return errors.New("WithSANPinning: nil verifier")
		}
		c.auth = &pinningAuth{v: v}
		return nil
	}
}

// RootsSetter is a SANVerifier whose CA roots can be replaced while it is
// in use (*identity.Verifier's SetRoots).
type RootsSetter interface {
	SetRoots(*x509.CertPool)
}

// WithClientCAFile makes SAN pinning (WithSANPinning, whose verifier must
// be a RootsSetter) also require the client certificate to chain to the CAs
// of the PEM file path (filewatch.ParseCABundle: CA certificates only, one
// at least not expired). The file is read by New (an unusable file is an
// error) and reloaded while the listener runs (package filewatch); an
// unusable new content keeps the CAs in use.
func WithClientCAFile(path string) Option {
	return func(c *config) error {
		if path == "" {
			return errors.New("WithClientCAFile: empty path")
		}
		c.caFile = path
		return nil
	}
}

// WithVerifyFunc selects identity mode c: f decides (see VerifyFunc).
func WithVerifyFunc(f VerifyFunc) Option {
	return func(c *config) error {
		if f == nil {
			return errors.New("WithVerifyFunc: nil function")
		}
		c.auth = &funcAuth{f: f}
		return nil
	}
}

// WithVerifyTimeout bounds SAN pinning and a VerifyFunc per request
// (default DefaultVerifyTimeout); when it passes the request gets 503.
func WithVerifyTimeout(d time.Duration) Option {
	return func(c *config) error {
		if d <= 0 {
			return errors.New("WithVerifyTimeout: must be positive")
		}
		c.verifyTimeout = d
		return nil
	}
}

// maxRuntimeIDBytes bounds a runtime ID (a Kubernetes object name).
const maxRuntimeIDBytes = validation.DNS1123SubdomainMaxLength

// validRuntimeID reports whether id can name a Kyma CR or be the value of
// its runtime-id label — the only runtime IDs SAN pinning can have accepted.
func validRuntimeID(id string) bool {
	if id == "" || len(id) > maxRuntimeIDBytes {
		return false
	}
	// pinning.IsDNS1123Subdomain is apimachinery's check without a
	// regular expression (it runs on every request).
	return pinning.IsDNS1123Subdomain(id) || len(validation.IsValidLabelValue(id)) == 0
}

// runtimeIDKey is contract.HeaderRuntimeID in canonical form, the key of
// http.Header (Header.Values would canonicalize it on every request).
var runtimeIDKey = textproto.CanonicalMIMEHeaderKey(contract.HeaderRuntimeID)

type headerAuth struct{}

func (headerAuth) mode() string { return "runtime-id-header" }

func (headerAuth) authenticate(r *http.Request) (string, *rejection) {
	vals := r.Header[runtimeIDKey]
	switch {
	case len(vals) == 0 || (len(vals) == 1 && vals[0] == ""):
		return "", &rejection{status: http.StatusUnauthorized,
			message: "missing " + contract.HeaderRuntimeID + " header: events must pass the gateway's ext-authz"}
	case len(vals) > 1:
		return "", &rejection{status: http.StatusUnauthorized, message: "several " + contract.HeaderRuntimeID + " headers"}
	case !validRuntimeID(vals[0]):
		return "", &rejection{status: http.StatusUnauthorized, message: "invalid " + contract.HeaderRuntimeID + " header"}
	}
	return vals[0], nil
}

type pinningAuth struct {
	v       SANVerifier
	timeout time.Duration
}

func (*pinningAuth) mode() string { return "san-pinning" }

func (a *pinningAuth) authenticate(r *http.Request) (string, *rejection) {
	vals := r.Header.Values(contract.HeaderXFCC)
	if len(vals) == 0 || (len(vals) == 1 && vals[0] == "") {
		return "", &rejection{status: http.StatusUnauthorized, reason: contract.ReasonMissingClientCert,
			message: "no client certificate (" + contract.HeaderXFCC + " header)"}
	}
	// Several header lines are several XFCC elements; pinning refuses them.
	xfcc := strings.Join(vals, ",")
	if len(xfcc) > contract.MaxXFCCBytes {
		return "", &rejection{status: http.StatusForbidden, reason: contract.ReasonMalformedXFCC,
			message: contract.HeaderXFCC + " header too large"}
	}
	ctx, cancel := context.WithTimeout(r.Context(), a.timeout)
	defer cancel()
	id, err := a.v.Verify(ctx, xfcc, "")
	if err != nil {
		return "", rejectionFor(err, "cannot verify the client certificate now")
	}
	if !validRuntimeID(id.RuntimeID) {
		return "", &rejection{status: http.StatusForbidden, reason: contract.ReasonInvalidCertificate,
			message: "certificate CN is not a valid runtime ID"}
	}
	return id.RuntimeID, nil
}

type funcAuth struct {
	f       VerifyFunc
	timeout time.Duration
}

func (*funcAuth) mode() string { return "verify-func" }

func (a *funcAuth) authenticate(r *http.Request) (string, *rejection) {
	ctx, cancel := context.WithTimeout(r.Context(), a.timeout)
	defer cancel()
	id, err := a.f(r.WithContext(ctx))
	switch {
	case errors.Is(err, ErrUnauthenticated):
		return "", &rejection{status: http.StatusUnauthorized, message: err.Error()}
	case errors.Is(err, ErrUnavailable):
		return "", &rejection{status: http.StatusServiceUnavailable, reason: contract.ReasonNotReady, message: err.Error()}
	case err != nil:
		var d *identity.Denial
		if errors.As(err, &d) {
			return "", rejectionFor(err, "")
		}
		return "", &rejection{status: http.StatusForbidden, message: "request not verified: " + err.Error()}
	case !validRuntimeID(id):
		return "", &rejection{status: http.StatusForbidden, message: "verification returned an invalid runtime ID"}
	}
	return id, nil
}

// rejectionFor maps a pinning error: a Denial is 403 with its reason (401
// when no certificate was presented); anything else is 503, fail closed.
func rejectionFor(err error, unavailable string) *rejection {
	var d *identity.Denial
	if errors.As(err, &d) {
		status := http.StatusForbidden
		if d.Reason == contract.ReasonMissingClientCert {
			status = http.StatusUnauthorized
		}
		return &rejection{status: status, reason: d.Reason, message: d.Message}
	}
	return &rejection{status: http.StatusServiceUnavailable, reason: contract.ReasonNotReady, message: unavailable}
}
