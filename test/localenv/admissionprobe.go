package localenv

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/seed-c8be168e/runtime-watcher/api/v1beta2"
	"github.com/seed-c8be168e/runtime-watcher/test/promtext"
)

// waitAdmission returns once the SKR API server calls the skr-webhook for
// the sample Watcher's objects. A webhook configuration that was just
// written takes a moment to reach the API server's admission chain; a
// change made before that is never reviewed and never becomes an event, so
// Start must not hand the system over earlier. It probes with dry-run
// creates (webhooks with sideEffects NoneOnDryRun are called for them and
// emit nothing) and watches the webhook's admission counter.
func (s *System) waitAdmission(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: SKRNamespace}}
	if err := s.SKR.Client.Create(ctx, ns); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("namespace %s: %w", SKRNamespace, err)
	}
	probe := &unstructured.Unstructured{}
	probe.SetGroupVersionKind(v1beta2.KymaGroupVersionKind)
	probe.SetNamespace(SKRNamespace)
	probe.SetName("admission-probe")
	probe.SetLabels(map[string]string{WatchedLabel: Manager})
	return poll(ctx, 200*time.Millisecond, func(ctx context.Context) (bool, error) {
		if err := s.SKR.Client.Create(ctx, probe.DeepCopy(), client.DryRunAll); err != nil && !apierrors.IsAlreadyExists(err) {
			return false, fmt.Errorf("dry-run create of the admission probe: %w", err)
		}
		n, err := admissionRequests(ctx, s.WebhookMetricsURL)
		return err == nil && n > 0, nil // not serving yet: poll again
	})
}

// admissionRequests sums runtime_watcher_skr_webhook_admission_requests_total
// from the webhook's /metrics.
func admissionRequests(ctx context.Context, url string) (float64, error) {
	text, err := promtext.Fetch(ctx, url)
	if err != nil {
		return 0, err
	}
	sum, _ := promtext.Sum(text, "runtime_watcher_skr_webhook_admission_requests_total", nil)
	return sum, nil
}
