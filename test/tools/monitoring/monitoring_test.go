package monitoring

import (
	"encoding/json"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/rulefmt"
	promparser "github.com/prometheus/prometheus/promql/parser"
	"go.yaml.in/yaml/v3"
)

const (
	root      = "../../.."
	ruleFile  = root + "/manifests/monitoring/prometheusrule.yaml"
	dashboard = root + "/manifests/monitoring/runtime-watcher-dashboard.json"
)

var metricName = regexp.MustCompile(`^runtime_watcher_[a-z0-9_]+$`)

// definedMetrics collects the metric names this repository's (non-test) Go
// code defines: string literals that are whole metric names (constants and
// Opts.Name), and Opts literals composed of Namespace, Subsystem and Name.
// Histograms and summaries also expose _bucket, _sum and _count.
func definedMetrics(t *testing.T) map[string]bool {
	t.Helper()
	names := map[string]bool{}
	add := func(n string) {
		for _, s := range []string{"", "_bucket", "_sum", "_count"} {
			names[n+s] = true
		}
	}
	fset := token.NewFileSet()
	// Parse every file first: a package's string constants (e.g. Namespace
	// and Subsystem in one file, Opts{Namespace: Namespace, Subsystem:
	// Subsystem, Name: "..."} in another) resolve across its files.
	files := map[string][]*ast.File{} // directory -> files
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			switch d.Name() {
			case ".git", "bin", "testdata", "tools":
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			return err
		}
		files[filepath.Dir(path)] = append(files[filepath.Dir(path)], f)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, pkg := range files {
		consts := map[string]string{}
		for _, f := range pkg {
			for _, decl := range f.Decls {
				gd, ok := decl.(*ast.GenDecl)
				if !ok || gd.Tok != token.CONST {
					continue
				}
				for _, spec := range gd.Specs {
					vs := spec.(*ast.ValueSpec)
					for i, name := range vs.Names {
						if i < len(vs.Values) {
							if lit, ok := vs.Values[i].(*ast.BasicLit); ok && lit.Kind == token.STRING {
								consts[name.Name], _ = strconv.Unquote(lit.Value)
							}
						}
					}
				}
			}
		}
		for _, f := range pkg {
			inspect(f, consts, add)
		}
	}
	if len(names) < 40 {
		t.Fatalf("found only %d metric names: the scan is not looking at the code", len(names))
	}
	return names
}

// inspect adds the metric names f defines: string literals that are whole
// metric names, and Opts literals composed of string literals and consts.
func inspect(f *ast.File, consts map[string]string, add func(string)) {
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.BasicLit:
			if s, err := strconv.Unquote(n.Value); err == nil && n.Kind == token.STRING && metricName.MatchString(s) {
				add(s)
			}
		case *ast.CompositeLit:
			parts := map[string]string{}
			for _, e := range n.Elts {
				kv, ok := e.(*ast.KeyValueExpr)
				if !ok {
					continue
				}
				k, ok := kv.Key.(*ast.Ident)
				if !ok {
					continue
				}
				switch v := kv.Value.(type) {
				case *ast.BasicLit:
					if v.Kind == token.STRING {
						parts[k.Name], _ = strconv.Unquote(v.Value)
					}
				case *ast.Ident:
					if c, ok := consts[v.Name]; ok {
						parts[k.Name] = c
					}
				}
			}
			if parts["Namespace"] != "" && parts["Name"] != "" {
				full := parts["Namespace"]
				if parts["Subsystem"] != "" {
					full += "_" + parts["Subsystem"]
				}
				add(full + "_" + parts["Name"])
			}
		}
		return true
	})
}

// usedMetrics returns the metric names an expression selects.
func usedMetrics(t *testing.T, where, expr string) []string {
	t.Helper()
	e, err := promparser.ParseExpr(expr)
	if err != nil {
		t.Errorf("%s: %q does not parse: %v", where, expr, err)
		return nil
	}
	var out []string
	promparser.Inspect(e, func(n promparser.Node, _ []promparser.Node) error {
		if vs, ok := n.(*promparser.VectorSelector); ok {
			name := vs.Name
			for _, m := range vs.LabelMatchers {
				if m.Name == labels.MetricName && m.Type == labels.MatchEqual {
					name = m.Value
				}
			}
			if name == "" {
				t.Errorf("%s: %q selects series without a metric name", where, expr)
			}
			out = append(out, name)
		}
		return nil
	})
	if len(out) == 0 {
		t.Errorf("%s: %q names no metric", where, expr)
	}
	return out
}

func TestPrometheusRule(t *testing.T) {
	b, err := os.ReadFile(ruleFile)
	if err != nil {
		t.Fatal(err)
	}
	var cr struct {
		APIVersion string         `yaml:"apiVersion"`
		Kind       string         `yaml:"kind"`
		Spec       map[string]any `yaml:"spec"`
	}
	if err := yaml.Unmarshal(b, &cr); err != nil {
		t.Fatal(err)
	}
	if cr.APIVersion != "monitoring.coreos.com/v1" || cr.Kind != "PrometheusRule" {
		t.Fatalf("%s %s", cr.APIVersion, cr.Kind)
	}
	// The spec of a PrometheusRule is a Prometheus rule file: load it the
	// way Prometheus does (unknown fields refused).
	spec, err := yaml.Marshal(cr.Spec)
	if err != nil {
		t.Fatal(err)
	}
	groups, errs := rulefmt.Parse(spec, false)
	for _, e := range errs {
		t.Errorf("rule file: %v", e)
	}
	if groups == nil {
		t.Fatal("no groups")
	}
	defined := definedMetrics(t)
	for _, m := range istiodMetrics(t) {
		defined[m] = true
	}
	alerts := map[string]bool{}
	for _, g := range groups.Groups {
		for _, r := range g.Rules {
			alerts[r.Alert] = true
			for _, m := range usedMetrics(t, r.Alert, r.Expr) {
				if !defined[m] {
					t.Errorf("alert %s uses %s, which no code in this repository defines", r.Alert, m)
				}
			}
		}
	}
	// What issue 14 asks the rule to cover.
	for _, a := range []string{"RuntimeWatcherWatchPathSilent", "RuntimeWatcherEventsDropped", "RuntimeWatcherDeliveriesFailing", "RuntimeWatcherCertificateExpiresSoon"} {
		if !alerts[a] {
			t.Errorf("no alert %s", a)
		}
	}
}

// istiodMetrics are the metrics of istiod the rule uses (the gateway's
// rejected xDS, issue 40), each checked to be defined in the source of the
// istio.io/istio version test/tools/istio pins.
func istiodMetrics(t *testing.T) []string {
	t.Helper()
	names := []string{"pilot_total_xds_rejects"}
	cmd := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "istio.io/istio")
	cmd.Dir = root + "/test/tools/istio"
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("locate istio.io/istio (test/tools/istio): %v", err)
	}
	src, err := os.ReadFile(filepath.Join(strings.TrimSpace(string(out)), "pkg", "xds", "monitoring.go"))
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range names {
		if !strings.Contains(string(src), strconv.Quote(n)) {
			t.Errorf("istiod (pkg/xds/monitoring.go) defines no metric %s", n)
		}
	}
	return names
}

type dashboardPanel struct {
	Title   string                  `json:"title"`
	Type    string                  `json:"type"`
	Targets []struct{ Expr string } `json:"targets"`
	Panels  []dashboardPanel        `json:"panels"`
}

func TestDashboard(t *testing.T) {
	b, err := os.ReadFile(dashboard)
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Title  string           `json:"title"`
		UID    string           `json:"uid"`
		Panels []dashboardPanel `json:"panels"`
	}
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatal(err)
	}
	if d.Title == "" || d.UID == "" {
		t.Fatal("dashboard without title or uid")
	}
	defined := definedMetrics(t)
	used := map[string]bool{}
	var walk func([]dashboardPanel)
	queries := 0
	walk = func(ps []dashboardPanel) {
		for _, p := range ps {
			for _, tg := range p.Targets {
				queries++
				for _, m := range usedMetrics(t, "panel "+p.Title, tg.Expr) {
					used[m] = true
					if !defined[m] {
						t.Errorf("panel %q uses %s, which no code in this repository defines", p.Title, m)
					}
				}
			}
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	if queries < 10 {
		t.Fatalf("only %d queries", queries)
	}
	names := make([]string, 0, len(used))
	for n := range used {
		names = append(names, n)
	}
	sort.Strings(names)
	t.Logf("dashboard uses %d metrics: %s", len(names), strings.Join(names, ", "))
}
