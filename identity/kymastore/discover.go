package kymastore

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"

	"github.com/seed-c8be168e/runtime-watcher/api/v1beta2"
)

// maxDiscoveryBytes bounds a discovery answer read by get.
const maxDiscoveryBytes = 4 << 20

// ServerVersion asks the API server for /version (a plain GET with cfg's
// credentials, no discovery client) and returns its gitVersion.
func ServerVersion(ctx context.Context, cfg *rest.Config) (string, error) {
	var v struct {
		GitVersion string `json:"gitVersion"`
	}
	if err := get(ctx, cfg, "/version", &v); err != nil {
		return "", err
	}
	return v.GitVersion, nil
}

// KymaResource asks the API server how Kyma CRs are served and returns
// their resource; an error when they are not (the Kyma CRD is missing) or
// are cluster-scoped.
func KymaResource(ctx context.Context, cfg *rest.Config) (schema.GroupVersionResource, error) {
	gvk := v1beta2.KymaGroupVersionKind
	gv := gvk.GroupVersion()
	var list metav1.APIResourceList
	if err := get(ctx, cfg, "/apis/"+gv.String(), &list); err != nil {
		return schema.GroupVersionResource{}, fmt.Errorf("the API server does not serve %s (is the Kyma CRD installed?): %w", gv, err)
	}
	for _, r := range list.APIResources {
		if r.Kind != gvk.Kind || strings.Contains(r.Name, "/") {
			continue
		}
		if !r.Namespaced {
			return schema.GroupVersionResource{}, fmt.Errorf("%s %s is cluster-scoped; SAN pinning reads namespaced Kyma CRs", gv, gvk.Kind)
		}
		return gv.WithResource(r.Name), nil
	}
	return schema.GroupVersionResource{}, fmt.Errorf("the API server serves no %s in %s (is the Kyma CRD installed?)", gvk.Kind, gv)
}

// get GETs path of the API server as JSON into out.
func get(ctx context.Context, cfg *rest.Config, path string, out any) error {
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return err
	}
	base, _, err := rest.DefaultServerUrlFor(cfg)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(base.String(), "/")+path, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Accept", "application/json")
	if cfg.UserAgent != "" {
		req.Header.Set("User-Agent", cfg.UserAgent)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxDiscoveryBytes))
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s: %s", path, resp.Status, strings.TrimSpace(string(body[:min(len(body), 200)])))
	}
	return json.Unmarshal(body, out)
}
