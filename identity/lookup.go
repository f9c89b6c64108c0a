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
	"github.com/seed-c8be168e/runtime-watcher/identity/pinning"
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
// Kyma whose RuntimeIDOf is the runtime ID with pinning.LookupInIndex, the
// one implementation of the precedence (label before name; several Kyma CRs
// with one label are an error), which ext-authz's store uses as well.
func NewKymaLookup(r client.Reader, namespace string) RuntimeLookup {
	return &kymaLookup{r: r, ns: namespace}
}

type kymaLookup struct {
	r  client.Reader
	ns string
}

var _ pinning.KymaIndex = (*kymaLookup)(nil)

func (l *kymaLookup) LookupRuntime(ctx context.Context, runtimeID string) (Runtime, bool, error) {
	rt, found, err := pinning.LookupInIndex(ctx, l, runtimeID)
	if err != nil {
		return rt, found, fmt.Errorf("namespace %q: %w", l.ns, err)
	}
	return rt, found, nil
}

// KymasLabelled reads the Kyma CRs labelled id through the RuntimeIDField
// index (none when id cannot be a label value).
func (l *kymaLookup) KymasLabelled(ctx context.Context, id string) (int, pinning.KymaRef, error) {
	if id == "" || len(validation.IsValidLabelValue(id)) > 0 {
		return 0, pinning.KymaRef{}, nil
	}
	list := NewKymaList()
	if err := l.r.List(ctx, list, client.InNamespace(l.ns), client.MatchingFields{RuntimeIDField: id}); err != nil {
		return 0, pinning.KymaRef{}, err
	}
	if len(list.Items) == 0 {
		return 0, pinning.KymaRef{}, nil
	}
	return len(list.Items), refOf(&list.Items[0]), nil
}

// KymaNamed reads the Kyma CR named name (none when name cannot be a Kyma
// CR's name).
func (l *kymaLookup) KymaNamed(ctx context.Context, name string) (pinning.KymaRef, bool, error) {
	if !isDNS1123Subdomain(name) {
		return pinning.KymaRef{}, false, nil
	}
	k := NewKyma()
	err := l.r.Get(ctx, client.ObjectKey{Namespace: l.ns, Name: name}, k)
	switch {
	case apierrors.IsNotFound(err):
		return pinning.KymaRef{}, false, nil
	case err != nil:
		return pinning.KymaRef{}, false, err
	}
	return refOf(k), true, nil
}

func refOf(k *metav1.PartialObjectMetadata) pinning.KymaRef {
	a := k.GetAnnotations()
	return pinning.KymaRef{Name: k.GetName(), Label: k.GetLabels()[contract.LabelRuntimeID], SKRDomain: a[contract.AnnotationSKRDomain],
		Deleting: k.GetDeletionTimestamp() != nil, Retired: pinning.RetirementOf(a[contract.AnnotationRetiredCertificates])}
}
