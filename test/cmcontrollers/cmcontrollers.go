// Package cmcontrollers runs cert-manager's own controllers in-process
// against a local API server, for `make run`, the integration suites, the e2e
// suite and the benchmarks (docs/architecture.md §4): the controllers of
// cert-manager's `controller` binary that issue and renew Certificates with
// CA and SelfSigned issuers, built from the cert-manager module go.mod
// requires, with cert-manager's defaults and no webhook.
//
// cert-manager relies on the garbage collector for the CertificateRequests
// and Secrets it owns: run kube-controller-manager next to it
// (testenv.Cluster.StartControllerManager).
package cmcontrollers

import (
	"context"
	"errors"
	"fmt"
	"sync"

	controllerpkg "github.com/cert-manager/cert-manager/pkg/controller"
	"github.com/cert-manager/cert-manager/pkg/controller/certificaterequests/approver"
	crca "github.com/cert-manager/cert-manager/pkg/controller/certificaterequests/ca"
	crselfsigned "github.com/cert-manager/cert-manager/pkg/controller/certificaterequests/selfsigned"
	"github.com/cert-manager/cert-manager/pkg/controller/certificates/issuing"
	"github.com/cert-manager/cert-manager/pkg/controller/certificates/keymanager"
	"github.com/cert-manager/cert-manager/pkg/controller/certificates/readiness"
	"github.com/cert-manager/cert-manager/pkg/controller/certificates/requestmanager"
	"github.com/cert-manager/cert-manager/pkg/controller/certificates/revisionmanager"
	"github.com/cert-manager/cert-manager/pkg/controller/certificates/trigger"
	"github.com/cert-manager/cert-manager/pkg/controller/clusterissuers"
	"github.com/cert-manager/cert-manager/pkg/controller/issuers"
	_ "github.com/cert-manager/cert-manager/pkg/issuer/ca"         // the CA issuer type
	_ "github.com/cert-manager/cert-manager/pkg/issuer/selfsigned" // the SelfSigned issuer type
	"github.com/go-logr/logr"
	"k8s.io/klog/v2"
)

// Controllers are the cert-manager controllers Run starts (their names as
// cert-manager's --controllers flag spells them).
var Controllers = []string{
	trigger.ControllerName, keymanager.ControllerName, requestmanager.ControllerName,
	issuing.ControllerName, readiness.ControllerName, revisionmanager.ControllerName,
	approver.ControllerName, crca.CRControllerName, crselfsigned.CRControllerName,
	issuers.ControllerName, clusterissuers.ControllerName,
}

// Defaults of cert-manager's controller binary.
const (
	DefaultClusterResourceNamespace = "kube-system"
	DefaultQPS                      = 20
	DefaultBurst                    = 50
	// Workers per controller.
	Workers = 5
)

// Options of Run.
type Options struct {
	// Kubeconfig of the API server; required unless InCluster.
	Kubeconfig string
	// InCluster: the API server of the pod this runs in (its service
	// account), as cert-manager's controller binary does without
	// --kubeconfig; the kind e2e's cert-manager image (test/kind/cert-manager).
	InCluster bool
	// ClusterResourceNamespace holds ClusterIssuers' Secrets;
	// DefaultClusterResourceNamespace when empty.
	ClusterResourceNamespace string
	// QPS and Burst of its API clients; cert-manager's defaults when zero.
	QPS   float32
	Burst int
	// Log receives cert-manager's log and everything written to klog in
	// this process (cert-manager and client-go log there); discarded when
	// zero.
	Log logr.Logger
}

// klogOnce: klog is one per process; the first Run's logger keeps it.
var klogOnce sync.Once

// Run runs the controllers until ctx ends; it returns the first error of a
// controller, or nil once ctx ended and every controller stopped.
func Run(ctx context.Context, o Options) error {
	if o.Kubeconfig == "" && !o.InCluster {
		return errors.New("cmcontrollers: no kubeconfig")
	}
	if o.ClusterResourceNamespace == "" {
		o.ClusterResourceNamespace = DefaultClusterResourceNamespace
	}
	if o.QPS == 0 {
		o.QPS, o.Burst = DefaultQPS, DefaultBurst
	}
	log := o.Log
	if log.GetSink() == nil {
		log = logr.Discard()
	}
	klogOnce.Do(func() { klog.SetLogger(log) })
	ctx = logr.NewContext(ctx, log.WithName("cert-manager"))

	factory, err := controllerpkg.NewContextFactory(ctx, controllerpkg.ContextOptions{
		Kubeconfig:       o.Kubeconfig,
		KubernetesAPIQPS: o.QPS, KubernetesAPIBurst: o.Burst,
		IssuerOptions: controllerpkg.IssuerOptions{ClusterResourceNamespace: o.ClusterResourceNamespace},
	})
	if err != nil {
		return fmt.Errorf("cert-manager controller context: %w", err)
	}
	known := controllerpkg.Known()
	loops := make([]controllerpkg.Interface, 0, len(Controllers))
	for _, name := range Controllers {
		construct, ok := known[name]
		if !ok {
			return fmt.Errorf("cert-manager controller %q is not registered", name)
		}
		loop, err := construct(factory)
		if err != nil {
			return fmt.Errorf("cert-manager controller %q: %w", name, err)
		}
		loops = append(loops, loop)
	}
	// The informer factories start the informers the constructors asked for
	// (cert-manager's controller binary does the same, after them).
	shared, err := factory.Build()
	if err != nil {
		return err
	}
	shared.SharedInformerFactory.Start(ctx.Done())
	shared.KubeSharedInformerFactory.Start(ctx.Done())

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errs := make(chan error, len(loops))
	for i, loop := range loops {
		go func() {
			err := loop.Run(Workers, ctx)
			if err != nil {
				err = fmt.Errorf("cert-manager controller %q: %w", Controllers[i], err)
				cancel()
			}
			errs <- err
		}()
	}
	var all []error
	for range loops {
		all = append(all, <-errs)
	}
	return errors.Join(all...)
}
