package delivery

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
)

// IsTLSFailure tells a failed TLS handshake — the gateway's certificate is
// not trusted, or the gateway sent an alert (it refused the client
// certificate) — from other delivery failures. A CA rotation must cause none
// (docs/certificates.md); runtime_watcher_skr_webhook_tls_failures_total
// counts them.
func IsTLSFailure(err error) bool {
	if err == nil {
		return false
	}
	var (
		verify   *tls.CertificateVerificationError
		alert    tls.AlertError
		unknown  x509.UnknownAuthorityError
		invalid  x509.CertificateInvalidError
		hostname x509.HostnameError
		record   tls.RecordHeaderError
	)
	return errors.As(err, &verify) || errors.As(err, &alert) || errors.As(err, &unknown) ||
		errors.As(err, &invalid) || errors.As(err, &hostname) || errors.As(err, &record)
}
