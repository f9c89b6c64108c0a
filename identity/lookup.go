package identity

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/seed-c8be168e/runtime-watcher/api/contract"
	"github.com/seed-c8be168e/runtime-watcher/api/v1beta2"
)

// RuntimeIDField is the field index IndexRuntimeID registers on Kyma CRs:
// the value of their kyma-project.io/runtime-id label.
const RuntimeIDField = "metadata.labels." + contract.LabelRuntimeID

// RuntimeIDOf is the runtime ID of a Kyma CR: its kyma-project.io/runtime-id
// label when set and non-empty, else its name. It is the one definition every
// component uses (see the package documentation for the lookup's precedence).
func RuntimeIDOf(kyma metav1.Object) string {
	if id := kyma.GetLabels()[contract.LabelRuntimeID]; id != "" {
		return id
	}
	return kyma.GetName()
}

// NewKyma returns an empty Kyma CR as metadata only, the form Kyma CRs are
// cached and read in.
func NewKyma() *metav1.PartialObjectMetadata {
	k := &metav1.PartialObjectMetadata{}
	k.SetGroupVersionKind(v1beta2.KymaGroupVersionKind)
	return k
}

// NewKymaList returns an empty list of Kyma CRs as metadata only.
func NewKymaList() *metav1.PartialObjectMetadataList {
	l := &metav1.PartialObjectMetadataList{}
	l.SetGroupVersionKind(v1beta2.GroupVersion.WithKind("KymaList"))
	return l
}

// IndexRuntimeID registers the RuntimeIDField index on Kyma CRs (metadata
// only) with idx, normally a controller-runtime cache before it starts.
// NewKymaLookup needs it.
func IndexRuntimeID(ctx context.Context, idx client.FieldIndexer) error {
	return idx.IndexField(ctx, NewKyma(), RuntimeIDField, func(o client.Object) []string {
		if v := o.GetLabels()[contract.LabelRuntimeID]; v != "" {
			return []string{v}
		}
		return nil
	})
}

// NewKymaLookup returns a RuntimeLookup backed by a controller-runtime
// client.Reader (normally a cache with the IndexRuntimeID index) that reads
// Kyma CRs as metav1.PartialObjectMetadata in one namespace. It finds the
// Kyma whose RuntimeIDOf is the runtime ID, label before name:
//
//  1. the Kyma CRs labelled kyma-project.io/runtime-id=<id> (through the
//     index): one is the answer; several are an error, so callers fail
//     closed;
//  2. else the Kyma CR named <id>, unless it carries a runtime-id label
//     naming another runtime (it is that runtime's Kyma);
//  3. else the runtime is unknown (found=false).
func NewKymaLookup(r client.Reader, namespace string) RuntimeLookup {
	return &kymaLookup{r: r, ns: namespace}
}

type kymaLookup struct {
	r  client.Reader
	ns string
}

func (l *kymaLookup) LookupRuntime(ctx context.Context, runtimeID string) (Runtime, bool, error) {
	if len(validation.IsValidLabelValue(runtimeID)) == 0 && runtimeID != "" {
		list := NewKymaList()
		if err := l.r.List(ctx, list, client.InNamespace(l.ns), client.MatchingFields{RuntimeIDField: runtimeID}); err != nil {
			return Runtime{}, false, err
		}
		switch len(list.Items) {
		case 0:
		case 1:
			return runtimeOf(runtimeID, &list.Items[0]), true, nil
		default:
			return Runtime{}, false, fmt.Errorf("%d Kyma CRs in %q carry label %s=%s", len(list.Items), l.ns, contract.LabelRuntimeID, runtimeID)
		}
	}
	if !isDNS1123Subdomain(runtimeID) {
		return Runtime{}, false, nil // no Kyma can have this name
	}
	k := NewKyma()
	err := l.r.Get(ctx, client.ObjectKey{Namespace: l.ns, Name: runtimeID}, k)
	switch {
	case apierrors.IsNotFound(err):
		return Runtime{}, false, nil
	case err != nil:
		return Runtime{}, false, err
	case RuntimeIDOf(k) != runtimeID:
		return Runtime{}, false, nil // labelled for another runtime
	}
	return runtimeOf(runtimeID, k), true, nil
}

func runtimeOf(id string, k *metav1.PartialObjectMetadata) Runtime {
	return Runtime{ID: id, KymaName: k.GetName(), SKRDomain: k.GetAnnotations()[contract.AnnotationSKRDomain]}
}

// TrimKyma is a cache transform (client-go's TransformFunc) that keeps of a
// Kyma CR only what SAN pinning reads: name, namespace, UID, resource
// version, the runtime-id label and the skr-domain annotation. With it, a
// cache of many Kyma CRs stays small (no managedFields, no
// last-applied-configuration). Other objects pass unchanged.
func TrimKyma(obj any) (any, error) {
	k, ok := obj.(*metav1.PartialObjectMetadata)
	if !ok {
		return obj, nil
	}
	t := &metav1.PartialObjectMetadata{TypeMeta: k.TypeMeta}
	t.Name, t.Namespace, t.UID, t.ResourceVersion = k.Name, k.Namespace, k.UID, k.ResourceVersion
	t.DeletionTimestamp = k.DeletionTimestamp
	if v, ok := k.Labels[contract.LabelRuntimeID]; ok {
		t.Labels = map[string]string{contract.LabelRuntimeID: v}
	}
	if v, ok := k.Annotations[contract.AnnotationSKRDomain]; ok {
		t.Annotations = map[string]string{contract.AnnotationSKRDomain: v}
	}
	return t, nil
}
