package controllers

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/seed-c8be168e/runtime-watcher/api/v1beta2"
	"github.com/seed-c8be168e/runtime-watcher/module-sync/mirror"
)

func TestParseModuleResources(t *testing.T) {
	got, err := ParseModuleResources(" sample.kyma-project.io/v1alpha1/samples, serverless=operator.kyma-project.io/*/serverlesses ,")
	if err != nil {
		t.Fatal(err)
	}
	want := []mirror.ModuleResource{
		{GroupVersionResource: schema.GroupVersionResource{Group: "sample.kyma-project.io", Version: "v1alpha1", Resource: "samples"}},
		{GroupVersionResource: schema.GroupVersionResource{Group: "operator.kyma-project.io", Version: "*", Resource: "serverlesses"}, Module: "serverless"},
	}
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("got %+v, want %+v", got, want)
	}
	for _, bad := range []string{
		"", ",", "samples", "g/v", "g//r", "g/v/Samples", "g/v/r/x", "Bad_Name=g/v/r",
		"g/v1/r,g/v2/r",
	} {
		if _, err := ParseModuleResources(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
	var many []string
	for i := range MaxModuleResources + 1 {
		many = append(many, "g/v/r"+strings.Repeat("s", i+1))
	}
	if _, err := ParseModuleResources(strings.Join(many, ",")); err == nil {
		t.Error("more than MaxModuleResources accepted")
	}
}

func TestDesiredWatchers(t *testing.T) {
	o := Options{
		KymaNamespace:   "kcp-system",
		Service:         v1beta2.Service{Name: "module-sync", Namespace: "kcp-system", Port: 8082},
		GatewaySelector: map[string]string{"operator.kyma-project.io/watcher-gateway": "default"},
		ModuleResources: []mirror.ModuleResource{
			{GroupVersionResource: schema.GroupVersionResource{Group: "a.example.com", Version: "v1", Resource: "samples"}},
			{GroupVersionResource: schema.GroupVersionResource{Group: "b.example.com", Version: "*", Resource: "samples"}},
			{GroupVersionResource: schema.GroupVersionResource{Group: "c.example.com", Version: "v1", Resource: strings.Repeat("r", 63)}},
		},
	}
	ws := DesiredWatchers(o)
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
		if w.ManagerName() != DefaultManager || w.Spec.Field != v1beta2.SpecField {
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
