package localenv

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/wrapperspb"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/seed-c8be168e/runtime-watcher/api/contract"
	"github.com/seed-c8be168e/runtime-watcher/test/gateway"
	"github.com/seed-c8be168e/runtime-watcher/test/testenv"
	"github.com/seed-c8be168e/runtime-watcher/vs-controller/routing"
)

var update = flag.Bool("update", false, "rewrite testdata/istiod-gateway-xds.json from what istiod generates")

// TestIstiodGatewayXDS is the golden test of the gateway configuration the
// real istiod generates from manifests/ (mesh config, Gateway,
// AuthorizationPolicy) and the sample Watcher's VirtualService (written by
// vs-controller's routing reconciler): the LDS, RDS, CDS and EDS the
// ingress gateway receives, normalised (fixed local ports, resources
// sorted by name, JSON with sorted keys). A change to manifests/ or to the
// Istio version shows up as a diff; `go test ./test/localenv -run
// TestIstiodGatewayXDS -update` accepts it.
func TestIstiodGatewayXDS(t *testing.T) {
	testenv.SkipIfShort(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if _, err := testenv.IstiodBinary(); err != nil {
		t.Fatal(err)
	}
	env, err := testenv.Start("kcp")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = env.Stop() }()
	runCtx, runCancel := context.WithCancel(context.Background())
	s := &System{Env: env, KCP: env.Cluster("kcp"), Dir: t.TempDir(), runCtx: runCtx, cancel: runCancel, opts: Options{Log: testr.New(t)}}
	defer func() { _ = s.Stop() }()
	c := s.KCP.Client
	for _, ns := range []string{KymaNamespace, GatewayNamespace} {
		must(t, c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}))
	}
	// Fixed addresses: istiod only lists them; nothing connects.
	must(t, applyIstioConfig(ctx, c, []LocalService{
		{Name: ExtAuthzService, Namespace: KymaNamespace, Port: ExtAuthzPort, Protocol: "GRPC", Addr: "127.0.0.1:19001"},
		{Name: OperatorService, Namespace: KymaNamespace, Port: OperatorPort, Protocol: "HTTP", Addr: "127.0.0.1:18082"},
		{Name: GatewayService, Namespace: GatewayNamespace, Port: 443, Protocol: "HTTPS", Addr: GatewayProxyIP + ":18443", Labels: GatewayLabels},
	}))
	w := SampleWatcher()
	must(t, c.Create(ctx, w))
	r := &routing.Reconciler{Client: c, Recorder: events.NewFakeRecorder(100), GatewayNamespace: GatewayNamespace}
	for range 5 { // finalizer, then the VirtualService
		_, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(w)})
		must(t, err)
	}

	ports, err := s.ports.reserve(3)
	must(t, err)
	addr := func(i int) string { return "127.0.0.1:" + strconv.Itoa(ports[i]) }
	is, err := s.startIstiod(ctx, addr(0), addr(1), addr(2))
	must(t, err)
	gw, err := gateway.New(gateway.Config{XDSAddr: is.XDSAddr, Secrets: c, Log: testr.New(t),
		Node: gateway.Node{Name: GatewayProxyName, Namespace: GatewayNamespace, Labels: GatewayLabels, IP: GatewayProxyIP, ClusterID: "Kubernetes", DomainSuffix: IstioClusterDomain}})
	must(t, err)
	go func() { _ = gw.Run(runCtx) }()
	for gw.Route(GatewayHost, contract.EventPath(Manager)) == "" {
		select {
		case <-gw.Changed():
		case <-ctx.Done():
			t.Fatalf("the sample Watcher's route never arrived (xDS versions %v)", gw.Versions())
		}
	}

	got, err := normalise(gw.Resources())
	must(t, err)
	golden := filepath.Join("testdata", "istiod-gateway-xds.json")
	if *update {
		must(t, os.MkdirAll("testdata", 0o755))
		must(t, os.WriteFile(golden, got, 0o644))
	}
	want, err := os.ReadFile(golden)
	must(t, err)
	if !bytes.Equal(got, want) {
		tmp := filepath.Join(os.TempDir(), "istiod-gateway-xds.got.json")
		_ = os.WriteFile(tmp, got, 0o644)
		t.Fatalf("istiod's gateway xDS differs from %s (what it generated now: %s; diff them, and run with -update when the change is intended)", golden, tmp)
	}
}

// apiServerCluster is the KCP API server's own Service (kubernetes.default),
// whose endpoint is a random port: left out of the golden file.
const apiServerCluster = "outbound|443||kubernetes.default.svc.cluster.local"

// normalise renders the resources as JSON with sorted keys, without the API
// server's cluster. A typed config whose type this module does not know
// (istio.alpn's) is rendered by its type URL only.
func normalise(byType map[string][]proto.Message) ([]byte, error) {
	out := map[string][]any{}
	for t, ms := range byType {
		for _, m := range ms {
			if n := m.ProtoReflect().Descriptor().Fields().ByName("name"); n != nil && m.ProtoReflect().Get(n).String() == apiServerCluster {
				continue
			}
			if n := m.ProtoReflect().Descriptor().Fields().ByName("cluster_name"); n != nil && m.ProtoReflect().Get(n).String() == apiServerCluster {
				continue
			}
			m = proto.Clone(m)
			if err := knownAnys(m.ProtoReflect()); err != nil {
				return nil, err
			}
			b, err := protojson.Marshal(m)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", t, err)
			}
			var v any
			if err := json.Unmarshal(b, &v); err != nil {
				return nil, err
			}
			out[t] = append(out[t], v)
		}
	}
	b, err := json.MarshalIndent(out, "", " ")
	return append(b, '\n'), err
}

// knownAnys replaces, anywhere in m, an Any of an unregistered type by a
// StringValue holding its type URL.
func knownAnys(m protoreflect.Message) error {
	var err error
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		if fd.Kind() != protoreflect.MessageKind && fd.Kind() != protoreflect.GroupKind {
			return true
		}
		switch {
		case fd.IsList():
			l := v.List()
			for i := 0; i < l.Len() && err == nil; i++ {
				err = knownAny(l.Get(i).Message())
			}
		case fd.IsMap():
			if fd.MapValue().Kind() == protoreflect.MessageKind {
				v.Map().Range(func(_ protoreflect.MapKey, mv protoreflect.Value) bool {
					err = knownAny(mv.Message())
					return err == nil
				})
			}
		default:
			err = knownAny(v.Message())
		}
		return err == nil
	})
	return err
}

func knownAny(m protoreflect.Message) error {
	a, ok := m.Interface().(*anypb.Any)
	if !ok {
		return knownAnys(m)
	}
	if _, err := protoregistry.GlobalTypes.FindMessageByURL(a.GetTypeUrl()); err != nil {
		url := a.GetTypeUrl()
		repl, err := anypb.New(wrapperspb.String(url))
		if err != nil {
			return err
		}
		a.TypeUrl, a.Value = repl.TypeUrl, repl.Value
		return nil
	}
	inner, err := a.UnmarshalNew()
	if err != nil {
		return err
	}
	if err := knownAnys(inner.ProtoReflect()); err != nil {
		return err
	}
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(inner)
	a.Value = b
	return err
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
