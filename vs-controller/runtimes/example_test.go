package runtimes_test

import (
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/seed-c8be168e/runtime-watcher/api/contract"
	"github.com/seed-c8be168e/runtime-watcher/skrclient"
	"github.com/seed-c8be168e/runtime-watcher/vs-controller/certificates"
	"github.com/seed-c8be168e/runtime-watcher/vs-controller/runtimes"
)

// The names vs-controller derives from a Kyma CR.
func ExampleRuntimeID() {
	kyma := runtimes.NewKyma()
	kyma.ObjectMeta = metav1.ObjectMeta{Namespace: "kcp-system", Name: "kyma-sample",
		Labels: map[string]string{contract.LabelRuntimeID: "c3d4e5f6"}}
	id := runtimes.RuntimeID(kyma)
	fmt.Println(id, skrclient.SecretName(id), certificates.Name(id))
	// Output: c3d4e5f6 kubeconfig-c3d4e5f6 c3d4e5f6-webhook-tls
}
