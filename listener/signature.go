package listener

import (
	"errors"
	"net/http"

	"github.com/seed-c8be168e/runtime-watcher/api/contract"
	"github.com/seed-c8be168e/runtime-watcher/identity/assertion"
)

// WithIdentityKeyFile makes the listener verify the identity signature
// ext-authz adds to every allow (contract.HeaderIdentitySignature, package
// identity/assertion) against the Ed25519 public keys of the PEM file path:
// cert-manager's tls.crt of the signing Certificate, or PUBLIC KEY blocks
// (docs/security.md, "Routes cannot speak for a runtime"). The file is read
// by New (an unusable file is an error) and reloaded while the listener
// runs; the keys of the file before a reload stay accepted too (rotation).
//
// A request is then taken only when the signature is there, at most
// assertion.Validity old, made with one of these keys and over the
// request's x-watcher-runtime-id, x-watcher-skr-domain, method and path —
// so a route bound to the gateway that sets an identity header (or
// x-forwarded-client-cert, with WithSANPinning: the signed runtime must be
// the one pinned) or rewrites a path to this listener's is refused: 401
// when there is no signature, else 403, with the deny reason
// (identity-signature-*) as header and JSON body, counted in
// runtime_watcher_listener_identity_signature_refused_total{reason}.
//
// Without this option (the default, and what Kyma's gateway needs: it sends
// no signature) the listener trusts the identity headers as the gateway
// passes them; New logs that once. WithoutIdentitySignature says so
// explicitly and silences the log line.
func WithIdentityKeyFile(path string) Option {
	return func(c *config) error {
		if path == "" {
			return errors.New("WithIdentityKeyFile: empty path")
		}
		c.identityKeyFile = path
		return nil
	}
}

// WithoutIdentitySignature is the documented opt-out of WithIdentityKeyFile
// for Kyma's wire compatibility: behind Kyma's gateway (no signature on
// the wire) the listener trusts x-watcher-runtime-id as the gateway sets
// it, and only the gateway must reach it (NetworkPolicy). The signature
// check is then off, and New does not log that it is.
func WithoutIdentitySignature() Option {
	return func(c *config) error { c.noIdentitySignature = true; return nil }
}

// checkSignature verifies the identity signature of r when the listener
// has keys: nil when it holds for runtimeID (the runtime the identity mode
// established), else the rejection.
func (l *Listener) checkSignature(r *http.Request, runtimeID string) *rejection {
	if l.signatures == nil {
		return nil
	}
	signed, err := l.signatures.VerifyRequest(r)
	if err == nil && signed != runtimeID {
		err = &assertion.Refusal{Reason: contract.ReasonSignatureInvalid,
			Message: "the signed runtime is not the runtime " + l.cfg.auth.mode() + " identified"}
	}
	if err == nil {
		return nil
	}
	var ref *assertion.Refusal
	if !errors.As(err, &ref) { // VerifyRequest returns only refusals
		ref = &assertion.Refusal{Reason: contract.ReasonSignatureInvalid, Message: err.Error()}
	}
	l.metrics.signatureRefused(ref.Reason)
	status := http.StatusForbidden
	if ref.Reason == contract.ReasonSignatureMissing {
		status = http.StatusUnauthorized
	}
	return &rejection{status: status, reason: ref.Reason, message: ref.Message}
}
