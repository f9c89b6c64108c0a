package contract_test

import (
	"encoding/json"
	"testing"

	"github.com/seed-c8be168e/runtime-watcher/api/contract"
)

func TestManagerFromPaths(t *testing.T) {
	tests := []struct {
		path        string
		wantEvent   string
		eventOK     bool
		wantAdmit   string
		admissionOK bool
	}{
		{path: "/v2/lifecycle-manager/event", wantEvent: "lifecycle-manager", eventOK: true},
		{path: "/v2/Lifecycle-Manager/event", wantEvent: "Lifecycle-Manager"},
		{path: "/v2//event"},
		{path: "/v2/a/b/event", wantEvent: "a/b"},
		{path: "/v2/../event", wantEvent: ".."},
		{path: "/v1/lifecycle-manager/event"},
		{path: "/validate/lifecycle-manager", wantAdmit: "lifecycle-manager", admissionOK: true},
		{path: "/validate/", wantAdmit: ""},
		{path: "/validate/a/b", wantAdmit: "a/b"},
	}
	for _, tc := range tests {
		m, ok := contract.ManagerFromEventPath(tc.path)
		if m != tc.wantEvent || ok != tc.eventOK {
			t.Errorf("ManagerFromEventPath(%q) = %q, %v; want %q, %v", tc.path, m, ok, tc.wantEvent, tc.eventOK)
		}
		m, ok = contract.ManagerFromValidatePath(tc.path)
		if m != tc.wantAdmit || ok != tc.admissionOK {
			t.Errorf("ManagerFromValidatePath(%q) = %q, %v; want %q, %v", tc.path, m, ok, tc.wantAdmit, tc.admissionOK)
		}
	}
	if got := contract.EventPath("klm"); got != "/v2/klm/event" {
		t.Errorf("EventPath = %q", got)
	}
	if got := contract.ValidatePath("klm"); got != "/validate/klm" {
		t.Errorf("ValidatePath = %q", got)
	}
}

// Kyma's webhook marshals types.NamespacedName without JSON tags, so its keys
// are "Namespace"/"Name"; ours are lowercase. Both must decode.
func TestWatchEventDecodesBothKeyStyles(t *testing.T) {
	for _, body := range []string{
		`{"watched":{"namespace":"kcp-system","name":"kyma-sample"},"watchedGvk":{"group":"operator.kyma-project.io","version":"v1beta2","kind":"Kyma"}}`,
		`{"watched":{"Namespace":"kcp-system","Name":"kyma-sample"},"watchedGvk":{"group":"operator.kyma-project.io","version":"v1beta2","kind":"Kyma"}}`,
	} {
		var ev contract.WatchEvent
		if err := json.Unmarshal([]byte(body), &ev); err != nil {
			t.Fatalf("decode %s: %v", body, err)
		}
		want := contract.WatchEvent{
			Watched:    contract.ObjectKey{Namespace: "kcp-system", Name: "kyma-sample"},
			WatchedGvk: contract.GroupVersionKind{Group: "operator.kyma-project.io", Version: "v1beta2", Kind: "Kyma"},
		}
		if ev != want {
			t.Errorf("decode %s = %+v, want %+v", body, ev, want)
		}
	}
	out, err := json.Marshal(contract.WatchEvent{Watched: contract.ObjectKey{Namespace: "ns", Name: "n"}})
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"watched":{"namespace":"ns","name":"n"},"watchedGvk":{"group":"","version":"","kind":""}}`; string(out) != want {
		t.Errorf("encode = %s, want %s", out, want)
	}
}

// A change event keeps the plain struct encoding; resync and heartbeat
// events carry {} for the object they do not name (docs/architecture.md §4.8).
func TestWatchEventEncoding(t *testing.T) {
	type plain struct {
		Watched    contract.ObjectKey        `json:"watched"`
		WatchedGvk contract.GroupVersionKind `json:"watchedGvk"`
	}
	change := contract.WatchEvent{
		Watched:    contract.ObjectKey{Namespace: "kcp-system", Name: "kyma-sample"},
		WatchedGvk: contract.GroupVersionKind{Group: "operator.kyma-project.io", Version: "v1beta2", Kind: "Kyma"},
	}
	for _, ev := range []contract.WatchEvent{change, {}, {Watched: contract.ObjectKey{Name: "n"}}} {
		got, err := json.Marshal(ev)
		if err != nil {
			t.Fatal(err)
		}
		want, _ := json.Marshal(plain{ev.Watched, ev.WatchedGvk})
		if string(got) != string(want) {
			t.Errorf("change event %+v = %s, want %s", ev, got, want)
		}
	}
	for ev, want := range map[contract.WatchEvent]string{
		{Resync: contract.ResyncStartup}:  `{"watched":{},"watchedGvk":{},"resync":"startup"}`,
		{Resync: contract.ResyncOverflow}: `{"watched":{},"watchedGvk":{},"resync":"overflow"}`,
		{Resync: contract.ResyncExpired}:  `{"watched":{},"watchedGvk":{},"resync":"expired"}`,
		{Heartbeat: true}:                 `{"watched":{},"watchedGvk":{},"heartbeat":true}`,
	} {
		got, err := json.Marshal(ev)
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != want {
			t.Errorf("%+v = %s, want %s", ev, got, want)
		}
		var back contract.WatchEvent
		if err := json.Unmarshal(got, &back); err != nil || back != ev {
			t.Errorf("round trip of %s = %+v, %v", got, back, err)
		}
	}
}
