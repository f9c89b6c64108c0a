package syncmanager

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/seed-c8be168e/runtime-watcher/module-sync/mirror"
)

func TestParseModuleResources(t *testing.T) {
	got, err := ParseModuleResources(" sample=sample.kyma-project.io/v1alpha1/samples, serverless=operator.kyma-project.io/*/serverlesses ,")
	if err != nil {
		t.Fatal(err)
	}
	want := []mirror.ModuleResource{
		{GroupVersionResource: schema.GroupVersionResource{Group: "sample.kyma-project.io", Version: "v1alpha1", Resource: "samples"}, Module: "sample"},
		{GroupVersionResource: schema.GroupVersionResource{Group: "operator.kyma-project.io", Version: "*", Resource: "serverlesses"}, Module: "serverless"},
	}
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("got %+v, want %+v", got, want)
	}
	for _, bad := range []string{
		"", ",", "samples", "g/v", "g//r", "g/v/Samples", "g/v/r/x", "Bad_Name=g/v/r",
		"m=g/v1/r,n=g/v2/r", "g/v/r",
	} {
		if _, err := ParseModuleResources(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
	var many []string
	for i := range MaxModuleResources + 1 {
		many = append(many, "m=g/v/r"+strings.Repeat("s", i+1))
	}
	if _, err := ParseModuleResources(strings.Join(many, ",")); err == nil {
		t.Error("more than MaxModuleResources accepted")
	}
}
