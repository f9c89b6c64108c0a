package watchers

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/seed-c8be168e/runtime-watcher/api/v1beta2"
	"github.com/seed-c8be168e/runtime-watcher/module-sync/mirror"
)

func TestDesiredWatchers(t *testing.T) {
	o := Config{
		Manager:         "module-sync",
		KymaNamespace:   "kcp-system",
		Service:         v1beta2.Service{Name: "module-sync", Namespace: "kcp-system", Port: 8082},
		GatewaySelector: map[string]string{"operator.kyma-project.io/watcher-gateway": "default"},
		ModuleResources: []mirror.ModuleResource{
			{GroupVersionResource: schema.GroupVersionResource{Group: "a.example.com", Version: "v1", Resource: "samples"}},
			{GroupVersionResource: schema.GroupVersionResource{Group: "b.example.com", Version: "*", Resource: "samples"}},
			{GroupVersionResource: schema.GroupVersionResource{Group: "c.example.com", Version: "v1", Resource: strings.Repeat("r", 63)}},
		},
	}
	ws := Desired(o)
	if len(ws) != 3 {
		t.Fatalf("%d Watchers", len(ws))
	}
	names := map[string]bool{}
	for _, w := range ws {
		if p := w.SpecProblems(); len(p) > 0 {
			t.Errorf("Watcher %s: %v", w.Name, p)
		}
		if errs := validation.IsDNS1123Label(w.Name); len(errs) > 0 {
			t.Errorf("Watcher name %q: %v", w.Name, errs)
		}
		if len(validation.IsDNS1123Subdomain(w.WebhookName())) > 0 {
			t.Errorf("webhook name %q", w.WebhookName())
		}
		if w.ManagerName() != "module-sync" || w.Spec.Field != v1beta2.SpecField {
			t.Errorf("Watcher %s: manager %q field %q", w.Name, w.ManagerName(), w.Spec.Field)
		}
		names[w.Name] = true
	}
	if len(names) != 3 {
		t.Errorf("Watcher names collide: %v", names)
	}
	if ws[1].Spec.ResourceToWatch != (v1beta2.WatchableGVR{Group: "b.example.com", Version: "*", Resource: "samples"}) {
		t.Errorf("resourceToWatch %+v", ws[1].Spec.ResourceToWatch)
	}
}
