package admission_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/go-logr/logr"
	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/seed-c8be168e/runtime-watcher/api/contract"
	"github.com/seed-c8be168e/runtime-watcher/skr-webhook/admission"
)

func ExampleDecide() {
	req := &admissionv1.AdmissionRequest{
		UID:       "1",
		Kind:      metav1.GroupVersionKind{Group: "operator.kyma-project.io", Version: "v1beta2", Kind: "Kyma"},
		Operation: admissionv1.Update,
		Namespace: "kcp-system",
		Name:      "kyma-sample",
		OldObject: runtime.RawExtension{Raw: []byte(`{"metadata":{"name":"kyma-sample","labels":{"a":"1"}},"spec":{"channel":"regular"}}`)},
		Object:    runtime.RawExtension{Raw: []byte(`{"metadata":{"name":"kyma-sample","labels":{"a":"2"}},"spec":{"channel":"regular"}}`)},
	}
	_, outcome, _ := admission.Decide(req) // a label change of an object with a spec
	fmt.Println(outcome)

	req.Object.Raw = []byte(`{"metadata":{"name":"kyma-sample"},"spec":{"channel":"fast"}}`)
	ev, outcome, _ := admission.Decide(req)
	fmt.Println(outcome, ev.Watched.Namespace, ev.Watched.Name, ev.WatchedGvk.Kind)
	// Output:
	// unchanged
	// emitted kcp-system kyma-sample Kyma
}

type printQueue struct{}

func (printQueue) Enqueue(manager string, ev contract.WatchEvent) {
	fmt.Println("enqueued for", manager+":", ev.Watched.Namespace+"/"+ev.Watched.Name)
}

func ExampleNewHandler() {
	mux := http.NewServeMux()
	mux.Handle(contract.ValidatePathPrefix, admission.NewHandler(printQueue{}, logr.Discard(), nil))

	body := `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"42",
	  "kind":{"group":"operator.kyma-project.io","version":"v1beta2","kind":"Kyma"},
	  "operation":"DELETE","namespace":"kcp-system","name":"kyma-sample",
	  "oldObject":{"metadata":{"name":"kyma-sample","namespace":"kcp-system"}}}}`
	w := httptest.NewRecorder()
	mux.ServeHTTP(w, httptest.NewRequest(http.MethodPost, contract.ValidatePath("lifecycle-manager"), strings.NewReader(body)))
	fmt.Println(w.Code, w.Body.String())
	// Output:
	// enqueued for lifecycle-manager: kcp-system/kyma-sample
	// 200 {"kind":"AdmissionReview","apiVersion":"admission.k8s.io/v1","response":{"uid":"42","allowed":true}}
}
