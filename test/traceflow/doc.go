// Package traceflow holds the test that follows one SKR write to the
// operator across its traces (issue 26, issue 33): the skr-webhook's
// admission handler and delivery (its send span's W3C traceparent on the
// event), the gateway (upstream Envoy on the static edge of test/envoy,
// which forwards the traceparent), ext-authz's Check span and the
// listener's span — each the root of a new KCP trace linked to the sender's
// span, never its child — and the event's span context the operator
// continues.
package traceflow
