// Package traceflow holds the test that follows one SKR write to the
// operator in one trace (issue 26): the skr-webhook's admission handler and
// delivery (its send span's W3C traceparent on the event), the gateway
// (upstream Envoy on the static edge of test/envoy, which forwards the
// traceparent), ext-authz's Check span, the listener's span and the event's
// span context the operator continues.
package traceflow
