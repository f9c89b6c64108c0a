// Package contract is the one place for the wire contract between the parts
// of Runtime Watcher (docs/architecture.md §4): URL paths, HTTP headers, Kyma
// annotation and label keys, deny reasons, size limits and the WatchEvent
// body. Every component imports these names instead of re-declaring them.
//
// It depends on the standard library and k8s.io/apimachinery only, so
// operators can import it through the listener without pulling in Istio,
// Envoy or cert-manager.
package contract

import (
	"encoding/json"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
)

// Paths.
const (
	// EventPathPrefix starts every event path: POST /v2/<manager>/event.
	EventPathPrefix = "/v2/"
	// EventPathSuffix ends every event path.
	EventPathSuffix = "/event"
	// ValidatePathPrefix starts the admission path of the skr-webhook:
	// POST /validate/<manager>.
	ValidatePathPrefix = "/validate/"
)

// EventPath is the KCP path an SKR posts a manager's events to.
func EventPath(manager string) string { return EventPathPrefix + manager + EventPathSuffix }

// ValidatePath is the skr-webhook admission path for a manager.
func ValidatePath(manager string) string { return ValidatePathPrefix + manager }

// ManagerFromEventPath returns the manager named by an event path and whether
// the path is a valid event path (the manager must be a DNS-1123 label).
func ManagerFromEventPath(path string) (string, bool) {
	if !strings.HasPrefix(path, EventPathPrefix) || !strings.HasSuffix(path, EventPathSuffix) {
		return "", false
	}
	m := path[len(EventPathPrefix) : len(path)-len(EventPathSuffix)]
	return m, ValidManager(m)
}

// ManagerFromValidatePath returns the manager named by an admission path and
// whether it is valid.
func ManagerFromValidatePath(path string) (string, bool) {
	if !strings.HasPrefix(path, ValidatePathPrefix) {
		return "", false
	}
	m := path[len(ValidatePathPrefix):]
	return m, ValidManager(m)
}

// ValidManager reports whether name is a DNS-1123 label, the only form a
// manager name may take in a path.
func ValidManager(name string) bool {
	return len(validation.IsDNS1123Label(name)) == 0
}

// ManagerHeartbeats follows a manager's name on its line of skr-webhook's
// managers file ("<manager> heartbeats"): the manager opted in to
// heartbeats (Watcher spec.heartbeats). A line with the name alone gets
// none: Kyma's listener cannot tell a heartbeat from a change.
const ManagerHeartbeats = "heartbeats"

// HTTP headers (lowercase, as Envoy passes them to ext_authz).
const (
	// HeaderXFCC carries the client certificate set by the gateway
	// (forwardClientCertDetails: SANITIZE_SET).
	HeaderXFCC = "x-forwarded-client-cert"
	// HeaderRuntimeID is set by ext-authz on allow: the certificate's CN.
	HeaderRuntimeID = "x-watcher-runtime-id"
	// HeaderSKRDomain is set by ext-authz on allow: the Kyma's skr-domain,
	// lowercased, without a trailing dot.
	HeaderSKRDomain = "x-watcher-skr-domain"
	// HeaderDenyReason carries the DenyReason on a 403 from ext-authz.
	HeaderDenyReason = "x-watcher-deny-reason"
	// HeaderIdentitySignature is set by ext-authz on allow when it has a
	// signing key: its signature over the runtime ID, the SKR domain, the
	// method, the path and the time (package identity/assertion), so that
	// a listener or vs-controller's health port can tell ext-authz's
	// identity from one a route set after it.
	HeaderIdentitySignature = "x-watcher-identity-signature"
)

// Kyma CR keys used for SAN pinning.
const (
	// AnnotationSKRDomain on a Kyma CR holds the runtime's domain; the
	// client certificate must carry it as a DNS SAN.
	AnnotationSKRDomain = "skr-domain"
	// LabelRuntimeID on a Kyma CR names its runtime when the CR's name
	// differs from the runtime ID.
	LabelRuntimeID = "kyma-project.io/runtime-id"
	// LabelManagedBy on a Watcher is the fallback for spec.manager.
	LabelManagedBy = "operator.kyma-project.io/managed-by"
)

// LabelPartOf with the value PartOf marks what belongs to Runtime Watcher.
// On a Secret in vs-controller's Kyma namespace it is also the cache
// selector: vs-controller caches (and watches) only Secrets carrying it —
// the runtime certificates' Secrets (Certificate spec.secretTemplate), the
// CA Secrets, and kubeconfig Secrets an operator labelled
// (docs/security.md, "Least privilege").
const (
	LabelPartOf = "app.kubernetes.io/part-of"
	PartOf      = "runtime-watcher"
)

// DenyReason is the machine-readable reason ext-authz (or the listener's
// in-process pinning) gives for refusing a request.
type DenyReason string

// Deny reasons (docs/architecture.md §4.5, §4.1).
const (
	ReasonMissingClientCert   DenyReason = "missing-client-cert"
	ReasonMalformedXFCC       DenyReason = "malformed-xfcc"
	ReasonInvalidCertificate  DenyReason = "invalid-certificate"
	ReasonUnknownRuntime      DenyReason = "unknown-runtime"
	ReasonDomainNotSet        DenyReason = "domain-not-set"
	ReasonSANMismatch         DenyReason = "san-mismatch"
	ReasonTooManySANs         DenyReason = "too-many-sans"
	ReasonCertificateMismatch DenyReason = "certificate-mismatch"
	ReasonNotReady            DenyReason = "not-ready"

	// Refusals of the identity signature (HeaderIdentitySignature) by a
	// listener or vs-controller's health port: none on the request, not
	// one this version parses, older than its validity (or too far in the
	// future), made with a key the verifier does not hold, or not over
	// this request's identity, method and path (a route set an identity
	// header or rewrote the path after ext-authz).
	ReasonSignatureMissing    DenyReason = "identity-signature-missing"
	ReasonSignatureMalformed  DenyReason = "identity-signature-malformed"
	ReasonSignatureExpired    DenyReason = "identity-signature-expired"
	ReasonSignatureUnknownKey DenyReason = "identity-signature-unknown-key"
	ReasonSignatureInvalid    DenyReason = "identity-signature-invalid"
	// ReasonRevoked: the certificate was issued before the runtime's
	// current one and is retired (AnnotationRetiredCertificates).
	ReasonRevoked DenyReason = "revoked"
	// ReasonRateLimited: the pinned runtime is over its rate limit
	// (ext-authz answers 429 with Retry-After).
	ReasonRateLimited DenyReason = "rate-limited"
)

// DenyBody is the JSON body of a deny response: {"reason": ..., "message": ...}.
type DenyBody struct {
	Reason  DenyReason `json:"reason"`
	Message string     `json:"message"`
}

// Limits.
const (
	// MaxEventBodyBytes bounds a WatchEvent body (Kyma listener v2: 16 KiB).
	MaxEventBodyBytes = 16 << 10
	// MaxAdmissionBodyBytes bounds an AdmissionReview body.
	MaxAdmissionBodyBytes = 7 << 20
	// MaxXFCCBytes bounds the x-forwarded-client-cert header.
	MaxXFCCBytes = 32 << 10
	// MaxSANs bounds the SANs of a client certificate.
	MaxSANs = 100
)

// ObjectKey names the watched object. Kyma's webhook sends the keys as
// "Namespace"/"Name"; encoding/json matches keys case-insensitively, so both
// forms decode into it.
type ObjectKey struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
}

// GroupVersionKind of the watched object, as Kyma's listener v2 expects it.
type GroupVersionKind struct {
	Group   string `json:"group"`
	Version string `json:"version"`
	Kind    string `json:"kind"`
}

// WatchEvent is the body of POST /v2/<manager>/event (docs/architecture.md §4.4).
// The sender's identity is never part of it: it is the client certificate.
//
// Two kinds of event carry no object (docs/architecture.md §4.8): a resync
// ({"watched": {}, "watchedGvk": {}, "resync": "<reason>"}) tells the
// operator to re-read the runtime completely; a heartbeat
// ({"watched": {}, "watchedGvk": {}, "heartbeat": true}) only proves the
// watch path works. Old receivers ignore the extra keys.
type WatchEvent struct {
	Watched    ObjectKey        `json:"watched"`
	WatchedGvk GroupVersionKind `json:"watchedGvk"`
	// Resync is set on a resync event: why the sender may have missed
	// changes of this runtime.
	Resync ResyncReason `json:"resync,omitempty"`
	// Heartbeat is set on a heartbeat event.
	Heartbeat bool `json:"heartbeat,omitempty"`
}

// ResyncReason says why a resync event was sent (docs/architecture.md §4.8).
type ResyncReason string

// Resync reasons.
const (
	// ResyncStartup: the webhook started and cannot know what it missed
	// while it was down.
	ResyncStartup ResyncReason = "startup"
	// ResyncOverflow: events were dropped because a bound was hit (queue
	// full, too many reviews in flight, a review too large to read).
	ResyncOverflow ResyncReason = "overflow"
	// ResyncExpired: an event was retried past its maximum age.
	ResyncExpired ResyncReason = "expired"
	// ResyncRecovered: the runtime's watch path was broken and works again
	// (a health report failed and the next was taken, or the KCP's answer
	// to a health report says it had flagged the runtime): admission
	// reviews may have been missed meanwhile (docs/architecture.md §4.12).
	ResyncRecovered ResyncReason = "recovered"
)

// ResyncReasons are the resync reasons above, every one this version sends.
var ResyncReasons = []ResyncReason{ResyncStartup, ResyncOverflow, ResyncExpired, ResyncRecovered}

// IsControl reports whether the event is a resync or a heartbeat rather
// than the change of one object.
func (e WatchEvent) IsControl() bool { return e.Resync != "" || e.Heartbeat }

// MarshalJSON writes a change event exactly as encoding/json writes the
// struct (byte-identical to earlier releases). A resync or heartbeat event
// carries no object: a zero Watched or WatchedGvk is written as {} (the
// §3.8 body), not as an object of empty strings.
func (e WatchEvent) MarshalJSON() ([]byte, error) {
	type plain WatchEvent // no MarshalJSON: the default encoding
	if !e.IsControl() {
		return json.Marshal(plain(e))
	}
	var watched, gvk any = e.Watched, e.WatchedGvk
	if e.Watched == (ObjectKey{}) {
		watched = struct{}{}
	}
	if e.WatchedGvk == (GroupVersionKind{}) {
		gvk = struct{}{}
	}
	return json.Marshal(struct {
		Watched    any          `json:"watched"`
		WatchedGvk any          `json:"watchedGvk"`
		Resync     ResyncReason `json:"resync,omitempty"`
		Heartbeat  bool         `json:"heartbeat,omitempty"`
	}{watched, gvk, e.Resync, e.Heartbeat})
}
