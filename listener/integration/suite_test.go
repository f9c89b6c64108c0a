// Package integration_test runs the listener inside real controller-runtime
// managers against a real kube-apiserver and etcd (test/testenv): events
// posted over HTTP reach a controller through source.Channel and reconcile
// the right Kyma; in-process SAN pinning reads Kyma CRs from the manager's
// cache; and the example operator binary does the same as a process.
package integration_test

import (
	"context"
	"testing"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/seed-c8be168e/runtime-watcher/api/contract"
	"github.com/seed-c8be168e/runtime-watcher/api/v1beta2"
	"github.com/seed-c8be168e/runtime-watcher/test/testenv"
)

const kymaNamespace = "kcp-system"

var (
	env *testenv.Env
	kcp *testenv.Cluster
)

func TestIntegration(t *testing.T) {
	testenv.SkipIfShort(t)
	RegisterFailHandler(Fail)
	RunSpecs(t, "listener integration")
}

var _ = BeforeSuite(func() {
	logf.SetLogger(zap.New(zap.WriteTo(GinkgoWriter), zap.UseDevMode(true)))
	var err error
	env, err = testenv.Start("kcp")
	Expect(err).NotTo(HaveOccurred())
	kcp = env.Cluster("kcp")
	ctx := context.Background()
	Expect(kcp.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: kymaNamespace}})).To(Succeed())
})

var _ = AfterSuite(func() {
	if env != nil {
		Expect(env.Stop()).To(Succeed())
	}
})

// createKyma creates a Kyma CR in kymaNamespace with the skr-domain
// annotation (when domain is not empty) and labels.
func createKyma(ctx context.Context, name, domain string, labels map[string]string) *unstructured.Unstructured {
	k := &unstructured.Unstructured{}
	k.SetGroupVersionKind(v1beta2.KymaGroupVersionKind)
	k.SetNamespace(kymaNamespace)
	k.SetName(name)
	k.SetLabels(labels)
	if domain != "" {
		k.SetAnnotations(map[string]string{contract.AnnotationSKRDomain: domain})
	}
	Expect(unstructured.SetNestedField(k.Object, map[string]any{"channel": "regular"}, "spec")).To(Succeed())
	Expect(kcp.Client.Create(ctx, k)).To(Succeed())
	DeferCleanup(func(ctx SpecContext) {
		Expect(client.IgnoreNotFound(kcp.Client.Delete(ctx, k))).To(Succeed())
	})
	return k
}
