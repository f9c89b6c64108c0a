// Package admissionhold installs, on a test cluster's real API server, a
// validating webhook served by the test itself: for every write of the
// resources of a rule the API server calls it, and it calls the test's
// function before it allows the write — to hold the write (the API server, and the client
// that sent it, wait meanwhile), or to act at the moment a write of a given
// object arrives (module-sync's and vs-controller's TestShards stop the
// writer's process there: a pause that lands mid-pass).
package admissionhold

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"net"
	"net/http"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/seed-c8be168e/runtime-watcher/test/pki"
)

// ConfigMaps is the rule of every ConfigMap.
var ConfigMaps = admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"configmaps"}}

// Install makes c's API server call on (the webhook name) for every write
// that rule matches; on returns when the write may go on (it is allowed).
// The webhook stops with ctx; the API server ignores it when it fails.
func Install(ctx context.Context, c client.Client, name string, rule admissionregistrationv1.Rule, on func(ctx context.Context, req *admissionv1.AdmissionRequest)) error {
	ca, err := pki.NewCA(name + "-webhook")
	if err != nil {
		return err
	}
	leaf, err := ca.Issue(pki.LeafOptions{CommonName: "127.0.0.1", IPs: []net.IP{net.IPv4(127, 0, 0, 1)}})
	if err != nil {
		return err
	}
	cert, err := leaf.TLS()
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	srv := &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		review := &admissionv1.AdmissionReview{}
		if err := json.NewDecoder(r.Body).Decode(review); err != nil || review.Request == nil {
			http.Error(w, "bad review", http.StatusBadRequest)
			return
		}
		on(r.Context(), review.Request)
		if r.Context().Err() != nil {
			return
		}
		review.Response = &admissionv1.AdmissionResponse{UID: review.Request.UID, Allowed: true}
		review.Request = nil
		_ = json.NewEncoder(w).Encode(review)
	})}
	srv.TLSConfig = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	go func() { _ = srv.ServeTLS(ln, "", "") }()
	go func() { <-ctx.Done(); _ = srv.Close() }()
	url := "https://" + ln.Addr().String() + "/hold"
	none, ignore, timeout := admissionregistrationv1.SideEffectClassNone, admissionregistrationv1.Ignore, int32(30)
	return c.Create(ctx, &admissionregistrationv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{{
			Name:                    name + ".test.kyma-project.io",
			ClientConfig:            admissionregistrationv1.WebhookClientConfig{URL: &url, CABundle: ca.PEM},
			Rules:                   []admissionregistrationv1.RuleWithOperations{{Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.OperationAll}, Rule: rule}},
			SideEffects:             &none,
			FailurePolicy:           &ignore,
			TimeoutSeconds:          &timeout,
			AdmissionReviewVersions: []string{"v1"},
		}},
	})
}
