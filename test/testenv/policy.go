package testenv

import (
	"context"
	"fmt"
	"os"
	"strings"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"
)

// InstallPolicy creates, through c, the ValidatingAdmissionPolicy and its
// binding of the manifest at path (two YAML documents, as in
// manifests/kcp/base), as the manifests do in production.
func InstallPolicy(ctx context.Context, c client.Client, path string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	docs := strings.Split(string(b), "\n---\n")
	if len(docs) != 2 {
		return fmt.Errorf("%s: want the policy and its binding, got %d documents", path, len(docs))
	}
	policy, binding := &admissionregistrationv1.ValidatingAdmissionPolicy{}, &admissionregistrationv1.ValidatingAdmissionPolicyBinding{}
	for i, into := range []client.Object{policy, binding} {
		if err := yaml.UnmarshalStrict([]byte(docs[i]), into); err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		if err := c.Create(ctx, into); err != nil && !apierrors.IsAlreadyExists(err) {
			return err
		}
	}
	return nil
}
