// Command example is a small KCP operator built on the listener library:
// a controller-runtime manager runs the listener, and a controller whose
// source is source.Channel over the listener's events enqueues the Kyma CR
// of each event's runtime in --kyma-namespace (found by its runtime-id
// label or name, identity.NewKymaLookup) and reconciles it.
//
// For every event it reconciles it prints one human-readable line to
// stdout (the time it received the event, the runtime, the watched object
// and the Kyma it reconciled) and logs the same facts, structured, to
// stderr. A resync event (docs/architecture.md §4.8) re-reads the runtime and
// prints a line marked "resync (<reason>)". The listener serves on every
// replica; with --leader-elect only the leader accepts events (the others
// answer 503). GET /last-seen on the metrics address lists when each runtime
// was last heard from (heartbeats included). `make run` starts it.
//
// Identity (--identity): "header" (default) expects the gateway's ext-authz
// in front (x-watcher-runtime-id); "san-pinning" verifies the gateway's
// x-forwarded-client-cert in process against the Kyma CRs in
// --kyma-namespace (optionally requiring a chain to --ca-file). With
// --identity-key-file either also verifies ext-authz's identity signature.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"time"

	"github.com/go-logr/logr"
	"go.uber.org/zap/zapcore"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlconfig "sigs.k8s.io/controller-runtime/pkg/client/config"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/seed-c8be168e/runtime-watcher/filewatch"
	"github.com/seed-c8be168e/runtime-watcher/identity"
	"github.com/seed-c8be168e/runtime-watcher/listener"
	"github.com/seed-c8be168e/runtime-watcher/listener/example/eventline"
	"github.com/seed-c8be168e/runtime-watcher/startup"
)

// kymaEvent is the work item: the Kyma to reconcile and the event that
// caused it. Identical events still waiting are coalesced by the queue.
type kymaEvent struct {
	Kyma      types.NamespacedName
	RuntimeID string
	Watched   types.NamespacedName
	GVK       schema.GroupVersionKind
	Resync    string // reason of a resync event, "" for a change
	// KymaState is set when the lookup found no Kyma ("not found").
	KymaState string
	Received  time.Time
}

type options struct {
	startup.Common
	listenAddr, manager, kymaNamespace string
	metricsAddr, healthAddr            string
	identity, caFile, identityKeyFile  string
	tlsCertFile, tlsKeyFile            string
	print                              string
	leaderElect                        bool
	leaderElectionNamespace            string
}

func main() {
	startup.Main("example", parseOptions, func(ctx context.Context, o *options, _ logr.Logger) error {
		return run(ctx, *o, os.Stdout)
	})
}

// parseOptions reads and validates the flags (args without the program
// name). -h and --help print the usage to errOut and return flag.ErrHelp;
// --version returns at once with Version set.
func parseOptions(args []string, errOut io.Writer) (*options, error) {
	o := &options{}
	o.Zap = zap.Options{Development: true, Level: zapcore.InfoLevel}
	fs := o.FlagSet("example", "An example KCP operator that reconciles the Kyma of every SKR event it receives.", errOut)
	// --kubeconfig, read by ctrl.GetConfig.
	ctrlconfig.RegisterFlags(fs)
	fs.StringVar(&o.listenAddr, "listen-addr", ":8082", "address of the event endpoint (POST /v2/<manager>/event)")
	fs.StringVar(&o.manager, "manager", "example-operator", "manager name in the event path (a DNS-1123 label)")
	fs.StringVar(&o.kymaNamespace, "kyma-namespace", "kcp-system", "namespace of the Kyma CRs")
	fs.StringVar(&o.metricsAddr, "metrics-bind-address", ":8080", "address of /metrics (\"0\" disables)")
	fs.StringVar(&o.healthAddr, "health-probe-bind-address", ":8081", "address of /healthz and /readyz (\"0\" disables)")
	fs.Var(fs.Lookup("metrics-bind-address").Value, "metrics-addr", "deprecated: use --metrics-bind-address")
	fs.Var(fs.Lookup("health-probe-bind-address").Value, "health-addr", "deprecated: use --health-probe-bind-address")
	fs.BoolVar(&o.leaderElect, "leader-elect", false, "use leader election: every replica serves and is ready, only the leader accepts events (others answer 503) and reconciles")
	fs.StringVar(&o.leaderElectionNamespace, "leader-election-namespace", "", "namespace of the leader election Lease (default: --kyma-namespace)")
	fs.StringVar(&o.identity, "identity", "header", "how the sender is identified: header (behind ext-authz) or san-pinning (XFCC from the gateway)")
	fs.StringVar(&o.caFile, "ca-file", "", "with --identity=san-pinning: client certificates must chain to the CAs of this PEM file (reloaded when it changes)")
	fs.StringVar(&o.identityKeyFile, "identity-key-file", "", "verify ext-authz's identity signature against the Ed25519 public keys of this PEM file (the tls.crt of the signing Certificate; reloaded when it changes); empty: the identity headers are trusted as the gateway passes them (Kyma's gateway sends no signature)")
	fs.StringVar(&o.tlsCertFile, "tls-cert-file", "", "serve the event endpoint with TLS using this certificate (with --tls-key-file)")
	fs.StringVar(&o.tlsKeyFile, "tls-key-file", "", "key of --tls-cert-file")
	fs.StringVar(&o.print, "print", "text", "stdout format of the per-event line: text (for people) or json (one object per line, read by `make run` and the e2e suite)")
	if err := o.Parse(fs, args); err != nil || o.Version {
		return o, err
	}
	if errs := o.validate(); len(errs) > 0 {
		return nil, errs.ToAggregate()
	}
	return o, nil
}

// validate checks every flag, collecting every problem.
func (o *options) validate() field.ErrorList {
	var errs field.ErrorList
	if o.caFile != "" && o.identity != "san-pinning" {
		errs = append(errs, field.Invalid(startup.Flag("ca-file"), o.caFile, "needs --identity=san-pinning"))
	} else if _, err := filewatch.LoadCABundle(o.caFile, time.Now()); o.caFile != "" && err != nil {
		errs = append(errs, field.Invalid(startup.Flag("ca-file"), o.caFile, err.Error()))
	}
	return startup.Collect(errs,
		startup.DNSLabel("manager", o.manager),
		startup.DNSLabel("kyma-namespace", o.kymaNamespace),
		startup.OneOf("identity", o.identity, "header", "san-pinning"),
		startup.Together("tls-cert-file", o.tlsCertFile, "tls-key-file", o.tlsKeyFile),
		startup.OneOf("print", o.print, "text", "json"),
	)
}

func run(ctx context.Context, o options, out io.Writer) error {
	log := ctrl.Log.WithName("example")
	cfg, err := ctrl.GetConfig()
	if err != nil {
		return fmt.Errorf("kubeconfig: %w", err)
	}
	leNamespace := o.leaderElectionNamespace
	if leNamespace == "" {
		leNamespace = o.kymaNamespace
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Metrics:                 metricsserver.Options{BindAddress: o.metricsAddr},
		HealthProbeBindAddress:  o.healthAddr,
		Cache:                   cache.Options{DefaultNamespaces: map[string]cache.Config{o.kymaNamespace: {}}},
		LeaderElection:          o.leaderElect,
		LeaderElectionID:        "example-operator.runtime-watcher.kyma-project.io",
		LeaderElectionNamespace: leNamespace,
		// The listener and the controller get this long to stop on SIGTERM.
		GracefulShutdownTimeout: ptr.To(10 * time.Second),
	})
	if err != nil {
		return fmt.Errorf("manager: %w", err)
	}

	// One Kyma lookup (by runtime-id label, else name) for SAN pinning and
	// for finding the Kyma of an event.
	if err := identity.IndexRuntimeID(ctx, mgr.GetFieldIndexer()); err != nil {
		return fmt.Errorf("runtime-id index: %w", err)
	}
	lookup := identity.NewKymaLookup(mgr.GetCache(), o.kymaNamespace)
	lopts := []listener.Option{listener.WithLogger(ctrl.Log.WithName("listener"))}
	switch o.identity {
	case "header":
		lopts = append(lopts, listener.WithRuntimeIDHeader())
	case "san-pinning":
		lopts = append(lopts, listener.WithSANPinning(&identity.Verifier{Lookup: lookup}))
		if o.caFile != "" { // reloaded while the operator runs
			lopts = append(lopts, listener.WithClientCAFile(o.caFile))
		}
	default: // parseOptions accepts no other
		return fmt.Errorf("--identity must be header or san-pinning, not %q", o.identity)
	}
	if o.identityKeyFile != "" {
		lopts = append(lopts, listener.WithIdentityKeyFile(o.identityKeyFile))
	}
	if o.tlsCertFile != "" {
		lopts = append(lopts, listener.WithTLSFiles(o.tlsCertFile, o.tlsKeyFile))
	}
	// Watch Kyma CRs from the start, so readiness waits for them and the
	// first event does not.
	if _, err := mgr.GetCache().GetInformer(ctx, identity.NewKyma()); err != nil {
		return fmt.Errorf("informer for Kymas: %w", err)
	}
	l, err := listener.New(o.listenAddr, o.manager, lopts...)
	if err != nil {
		return err
	}
	// The server on every replica (ready when it listens), the consumer
	// marker on the leader.
	if err := l.SetupWithManager(mgr); err != nil {
		return err
	}
	if err := mgr.AddHealthzCheck("ping", healthz.Ping); err != nil {
		return err
	}
	if o.metricsAddr != "0" {
		if err := mgr.AddMetricsServerExtraHandler("/last-seen", lastSeenHandler(l)); err != nil {
			return err
		}
	}
	if err := mgr.AddReadyzCheck("kyma-cache", cacheSynced(mgr.GetCache())); err != nil {
		return err
	}

	r := &reconciler{client: mgr.GetClient(), out: out, json: o.print == "json"}
	err = builder.TypedControllerManagedBy[kymaEvent](mgr).
		Named("skr-events").
		WatchesRawSource(source.TypedChannel(l.Events(), enqueueKyma(lookup, o.kymaNamespace))).
		Complete(r)
	if err != nil {
		return fmt.Errorf("controller: %w", err)
	}

	fmt.Fprintf(out, "example operator: listening for SKR events on %s%s (identity: %s), reconciling Kymas in namespace %s\n",
		o.listenAddr, l.Path(), o.identity, o.kymaNamespace)
	log.Info("starting", "listenAddr", o.listenAddr, "path", l.Path(), "identity", o.identity, "kymaNamespace", o.kymaNamespace)
	return mgr.Start(ctx)
}

// cacheSynced is ready once the cache (Kyma CRs for SAN pinning and the
// reconciler) has synced; each check waits at most a moment.
func cacheSynced(c cache.Cache) healthz.Checker {
	return func(req *http.Request) error {
		ctx, cancel := context.WithTimeout(req.Context(), 200*time.Millisecond)
		defer cancel()
		if !c.WaitForCacheSync(ctx) {
			return errors.New("cache not synced")
		}
		return nil
	}
}

// enqueueKyma turns a listener event into a work item for the Kyma of its
// runtime (listener.KymaOf: by runtime-id label, else name), stamped with
// the time it was received. A runtime without a Kyma is still reported
// ("not found"); a failed lookup is logged and the event dropped.
func enqueueKyma(lookup identity.RuntimeLookup, namespace string) handler.TypedEventHandler[client.Object, kymaEvent] {
	return handler.TypedFuncs[client.Object, kymaEvent]{
		GenericFunc: func(ctx context.Context, e event.GenericEvent, q workqueue.TypedRateLimitingInterface[kymaEvent]) {
			ev, ok := listener.EventFrom(e.Object)
			if !ok {
				return
			}
			key, found, err := listener.KymaOf(ctx, lookup, namespace, ev.RuntimeID)
			if err != nil {
				ctrl.Log.WithName("example").Error(err, "cannot find the Kyma of the event's runtime", "runtimeID", ev.RuntimeID, "resync", ev.Resync)
				return
			}
			item := kymaEvent{
				Kyma:      key,
				RuntimeID: ev.RuntimeID,
				Watched:   ev.Watched,
				GVK:       ev.WatchedGVK,
				Resync:    ev.Resync,
				Received:  time.Now(),
			}
			if !found {
				item.Kyma, item.KymaState = types.NamespacedName{Namespace: namespace}, "not found"
			}
			q.Add(item)
		},
	}
}

// lastSeenHandler answers GET /last-seen with a JSON object: runtime ID →
// when this replica last accepted an event or heartbeat of it (RFC 3339).
func lastSeenHandler(l *listener.Listener) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		all := l.LastSeenAll()
		out := make(map[string]string, len(all))
		for id, t := range all {
			out[id] = t.UTC().Format(time.RFC3339Nano)
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(out)
	})
}

type reconciler struct {
	client client.Client
	out    io.Writer
	json   bool
}

// Reconcile reads the Kyma (metadata only, from the cache) and reports the
// event. A real operator would reconcile the Kyma here.
func (r *reconciler) Reconcile(ctx context.Context, ev kymaEvent) (reconcile.Result, error) {
	// A resync means changes of this runtime may have been lost on the way:
	// a real operator re-reads everything of the runtime here. This one
	// re-reads its Kyma, as it does for every event.
	kyma := identity.NewKyma()
	state := ev.KymaState
	if state == "" {
		state = "exists"
		if err := r.client.Get(ctx, ev.Kyma, kyma); err != nil {
			if !apierrors.IsNotFound(err) {
				return reconcile.Result{}, fmt.Errorf("reading Kyma %s: %w", ev.Kyma, err)
			}
			state = "not found"
		}
	}
	msg := "SKR event reconciled"
	if ev.Resync != "" {
		msg = "SKR resync: runtime re-read"
	}
	ctrl.LoggerFrom(ctx).Info(msg,
		"runtimeID", ev.RuntimeID, "watched", ev.Watched.String(), "gvk", ev.GVK.String(), "resync", ev.Resync,
		"kyma", ev.Kyma.String(), "kymaState", state, "received", ev.Received.Format(time.RFC3339Nano))
	if r.json {
		b, err := json.Marshal(eventline.Line{
			Time: ev.Received, RuntimeID: ev.RuntimeID, Kyma: ev.Kyma.String(), KymaState: state, Resync: ev.Resync,
			Watched: eventline.Object{Namespace: ev.Watched.Namespace, Name: ev.Watched.Name},
			GVK:     eventline.GVK{Group: ev.GVK.Group, Version: ev.GVK.Version, Kind: ev.GVK.Kind},
		})
		if err != nil {
			return reconcile.Result{}, err
		}
		_, err = fmt.Fprintf(r.out, "%s\n", b)
		return reconcile.Result{}, err
	}
	if ev.Resync != "" {
		fmt.Fprintf(r.out, "%s  runtime %s: resync (%s) -> runtime re-read, Kyma %s reconciled (%s)\n",
			ev.Received.Format("15:04:05.000"), ev.RuntimeID, ev.Resync, ev.Kyma, state)
		return reconcile.Result{}, nil
	}
	fmt.Fprintf(r.out, "%s  runtime %s: %s %s changed -> Kyma %s reconciled (%s)\n",
		ev.Received.Format("15:04:05.000"), ev.RuntimeID, gvkText(ev.GVK), objectText(ev.Watched), ev.Kyma, state)
	return reconcile.Result{}, nil
}

func gvkText(gvk schema.GroupVersionKind) string {
	if gvk.Group == "" {
		return gvk.Kind + " " + gvk.Version
	}
	return gvk.Kind + " " + gvk.Group + "/" + gvk.Version
}

func objectText(n types.NamespacedName) string {
	if n.Namespace == "" {
		return n.Name
	}
	return n.String()
}
