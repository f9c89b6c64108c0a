package skrclient_test

import (
	"context"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/seed-c8be168e/runtime-watcher/skrclient"
)

// A KCP component that manages Deployments in the runtimes: it reads the
// runtime's kubeconfig Secret and gets a cached client that knows only
// Deployments.
func Example() {
	ctx := context.Background()
	// The KCP (a fake here) holds the kubeconfig Secret of runtime c3d4e5f6.
	kcp := fake.NewClientBuilder().WithObjects(&corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: "kcp-system", Name: skrclient.SecretName("c3d4e5f6")},
		Data: map[string][]byte{skrclient.SecretKey: []byte(`apiVersion: v1
kind: Config
clusters: [{name: skr, cluster: {server: "https://skr.example:6443"}}]
users: [{name: admin, user: {token: abc}}]
contexts: [{name: skr, context: {cluster: skr, user: admin}}]
current-context: skr
`)},
	}).Build()

	scheme := runtime.NewScheme()
	utilruntime.Must(appsv1.AddToScheme(scheme))
	clients := &skrclient.KubeconfigClients{
		Scheme:    scheme,
		Mapper:    skrclient.NewRESTMapper(map[schema.GroupVersionKind]bool{appsv1.SchemeGroupVersion.WithKind("Deployment"): false}),
		UserAgent: "module-sync",
	}

	kubeconfig, err := skrclient.Kubeconfig(ctx, kcp, "kcp-system", "c3d4e5f6")
	if err != nil || kubeconfig == nil {
		fmt.Println("no kubeconfig yet:", err)
		return
	}
	skr, err := clients.For(ctx, "kcp-system/c3d4e5f6", kubeconfig)
	if err != nil {
		fmt.Println("refused:", err)
		return
	}
	again, _ := clients.For(ctx, "kcp-system/c3d4e5f6", kubeconfig)
	fmt.Println(skrclient.SecretName("c3d4e5f6"), "-> cached client reused:", skr == again)
	// Output: kubeconfig-c3d4e5f6 -> cached client reused: true
}
