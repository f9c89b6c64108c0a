package identity_test

import (
	"context"
	"fmt"
	"slices"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/seed-c8be168e/runtime-watcher/api/contract"
	"github.com/seed-c8be168e/runtime-watcher/identity"
)

// kymaReader is a client.Reader over a fixed set of Kyma CRs (metadata
// only) with the index IndexRuntimeID registers, as a cache has it. The
// index function is the one IndexRuntimeID passes, not a copy of it. The
// lookup over a manager's cache of a real API server is tested in the
// listener's integration suite (in-process SAN pinning).
type kymaReader struct {
	kymas []*metav1.PartialObjectMetadata
	field string
	index client.IndexerFunc
}

func newKymaReader(kymas ...*metav1.PartialObjectMetadata) *kymaReader {
	r := &kymaReader{kymas: kymas}
	if err := identity.IndexRuntimeID(context.Background(), r); err != nil || r.index == nil {
		panic(fmt.Sprintf("IndexRuntimeID registered no index: %v", err))
	}
	return r
}

// IndexField records the index (client.FieldIndexer).
func (r *kymaReader) IndexField(_ context.Context, _ client.Object, field string, f client.IndexerFunc) error {
	r.field, r.index = field, f
	return nil
}

func (r *kymaReader) Get(_ context.Context, key client.ObjectKey, obj client.Object, _ ...client.GetOption) error {
	for _, k := range r.kymas {
		if k.Namespace == key.Namespace && k.Name == key.Name {
			*obj.(*metav1.PartialObjectMetadata) = *k.DeepCopy()
			return nil
		}
	}
	return apierrors.NewNotFound(schema.GroupResource{Group: "operator.kyma-project.io", Resource: "kymas"}, key.Name)
}

func (r *kymaReader) List(_ context.Context, list client.ObjectList, opts ...client.ListOption) error {
	o := (&client.ListOptions{}).ApplyOptions(opts)
	var want string
	if o.FieldSelector != nil {
		v, ok := o.FieldSelector.RequiresExactMatch(r.field)
		if !ok || len(o.FieldSelector.Requirements()) != 1 {
			return fmt.Errorf("field selector %q: only %s is indexed", o.FieldSelector, r.field)
		}
		want = v
	}
	l := list.(*metav1.PartialObjectMetadataList)
	for _, k := range r.kymas {
		if o.Namespace != "" && k.Namespace != o.Namespace {
			continue
		}
		if o.FieldSelector != nil && !slices.Contains(r.index(k), want) {
			continue
		}
		l.Items = append(l.Items, *k.DeepCopy())
	}
	return nil
}

var _ client.Reader = (*kymaReader)(nil)

// kyma is a Kyma CR in kcp-system with the skr-domain annotation <name>.example.com
// and, unless label is "", the runtime-id label.
func kyma(name, label string) *metav1.PartialObjectMetadata {
	k := identity.NewKyma()
	k.Namespace, k.Name = "kcp-system", name
	k.Annotations = map[string]string{contract.AnnotationSKRDomain: name + ".example.com"}
	if label != "" {
		k.Labels = map[string]string{contract.LabelRuntimeID: label}
	}
	return k
}

func TestRuntimeIDOf(t *testing.T) {
	empty := kyma("kyma-a", "")
	empty.Labels = map[string]string{contract.LabelRuntimeID: ""}
	for _, tt := range []struct {
		kyma *metav1.PartialObjectMetadata
		want string
	}{
		{kyma("kyma-a", ""), "kyma-a"},
		{kyma("kyma-a", "runtime-1"), "runtime-1"},
		{empty, "kyma-a"}, // an empty label is no label
	} {
		if got := identity.RuntimeIDOf(tt.kyma); got != tt.want {
			t.Errorf("RuntimeIDOf(%s, labels %v) = %q, want %q", tt.kyma.Name, tt.kyma.Labels, got, tt.want)
		}
	}
}

// TestKymaLookupPrecedence: the lookup returns the Kyma whose RuntimeIDOf is
// the ID, label before name.
func TestKymaLookupPrecedence(t *testing.T) {
	emptyLabel := kyma("runtime-e", "")
	emptyLabel.Labels = map[string]string{contract.LabelRuntimeID: ""}
	elsewhere := kyma("runtime-o", "")
	elsewhere.Namespace = "other"
	r := newKymaReader(
		kyma("kyma-label-only", "runtime-l"),         // label only: runtime-l
		kyma("runtime-n", ""),                        // name only: runtime-n
		kyma("runtime-x", "runtime-y"),               // named x, labelled y: runtime y, not x
		kyma("kyma-dup-1", "runtime-d"),              // two labelled d: ambiguous
		kyma("kyma-dup-2", "runtime-d"),              //
		kyma("runtime-s", ""),                        // named s ...
		kyma("kyma-s", "runtime-s"),                  // ... and another labelled s: the labelled one
		kyma("runtime-same", "runtime-same"),         // name and label agree
		emptyLabel,                                   // an empty label is no label: runtime-e
		elsewhere,                                    // other namespace: not found
		kyma("kyma-long", "Runtime_With.Caps-and_U"), // a label value that cannot be a name
	)
	lookup := identity.NewKymaLookup(r, "kcp-system")
	for _, tt := range []struct {
		id       string
		kymaName string // "" not found
		wantErr  bool
	}{
		{id: "runtime-l", kymaName: "kyma-label-only"},
		{id: "kyma-label-only"}, // its label names another runtime
		{id: "runtime-n", kymaName: "runtime-n"},
		{id: "runtime-y", kymaName: "runtime-x"},
		{id: "runtime-x"}, // belongs to runtime-y
		{id: "runtime-d", wantErr: true},
		{id: "kyma-dup-1"},
		{id: "runtime-s", kymaName: "kyma-s"},
		{id: "runtime-same", kymaName: "runtime-same"},
		{id: "runtime-e", kymaName: "runtime-e"},
		{id: "runtime-o"},
		{id: "Runtime_With.Caps-and_U", kymaName: "kyma-long"},
		{id: "runtime-unknown"},
		{id: ""},
		{id: string(make([]byte, 300))},
	} {
		rt, found, err := lookup.LookupRuntime(context.Background(), tt.id)
		if (err != nil) != tt.wantErr {
			t.Errorf("LookupRuntime(%q): error %v, want error %v", tt.id, err, tt.wantErr)
			continue
		}
		want := identity.Runtime{}
		if tt.kymaName != "" {
			want = identity.Runtime{ID: tt.id, KymaName: tt.kymaName, SKRDomain: tt.kymaName + ".example.com"}
		}
		if found != (tt.kymaName != "") || rt != want {
			t.Errorf("LookupRuntime(%q) = %+v, %v; want %+v, %v", tt.id, rt, found, want, tt.kymaName != "")
		}
		if found {
			for _, k := range r.kymas {
				if k.Name == rt.KymaName && k.Namespace == "kcp-system" && identity.RuntimeIDOf(k) != tt.id {
					t.Errorf("LookupRuntime(%q) returned Kyma %s whose runtime ID is %q", tt.id, k.Name, identity.RuntimeIDOf(k))
				}
			}
		}
	}
}

// Example_runtimeID shows the one precedence of runtime IDs: a Kyma's
// runtime ID is its kyma-project.io/runtime-id label when set, else its
// name, and looking up a runtime ID finds the labelled Kyma before the one
// of that name.
func Example_runtimeID() {
	kymas := []*metav1.PartialObjectMetadata{
		kyma("kyma-1", "runtime-1"), // labelled: runtime-1
		kyma("runtime-2", ""),       // no label: runtime-2
		kyma("runtime-3", "other"),  // named runtime-3, but labelled: runtime "other"
		kyma("runtime-4", ""),       // named runtime-4 ...
		kyma("kyma-4", "runtime-4"), // ... but this one is labelled runtime-4
	}
	for _, k := range kymas {
		fmt.Printf("Kyma %s is runtime %s\n", k.Name, identity.RuntimeIDOf(k))
	}
	lookup := identity.NewKymaLookup(newKymaReader(kymas...), "kcp-system")
	for _, id := range []string{"runtime-1", "runtime-2", "runtime-3", "other", "runtime-4"} {
		rt, found, err := lookup.LookupRuntime(context.Background(), id)
		fmt.Printf("runtime %s: Kyma %q found=%v err=%v\n", id, rt.KymaName, found, err)
	}
	// Output:
	// Kyma kyma-1 is runtime runtime-1
	// Kyma runtime-2 is runtime runtime-2
	// Kyma runtime-3 is runtime other
	// Kyma runtime-4 is runtime runtime-4
	// Kyma kyma-4 is runtime runtime-4
	// runtime runtime-1: Kyma "kyma-1" found=true err=<nil>
	// runtime runtime-2: Kyma "runtime-2" found=true err=<nil>
	// runtime runtime-3: Kyma "" found=false err=<nil>
	// runtime other: Kyma "runtime-3" found=true err=<nil>
	// runtime runtime-4: Kyma "kyma-4" found=true err=<nil>
}
