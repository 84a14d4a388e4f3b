package deploy

import (
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	"helm.sh/helm/v3/pkg/lint"
	"helm.sh/helm/v3/pkg/lint/support"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/llm-ring/llm-ring/internal/config"
)

// The Helm chart (issue 25), driven through Helm's own packages: its
// chart loader, linter and template engine are what `helm lint` and
// `helm template` run (helm.sh/helm/v3/pkg/action). The chart must render
// the router objects of deploy/k8s/base.

const chartDir = "helm/llm-ring"

// helmLabels are the labels the chart adds to those of deploy/k8s.
var helmLabels = []string{"app.kubernetes.io/instance", "app.kubernetes.io/managed-by", "app.kubernetes.io/version", "helm.sh/chart"}

// helmTemplate renders the chart as `helm template NAME chart -n NS
// --set-json ...` does and returns the objects, sorted by kind and name.
func helmTemplate(t *testing.T, ns string, vals map[string]any) []*unstructured.Unstructured {
	t.Helper()
	ch, err := loader.Load(chartDir)
	if err != nil {
		t.Fatalf("helm: load %s: %v", chartDir, err)
	}
	rv, err := chartutil.ToRenderValues(ch, vals,
		chartutil.ReleaseOptions{Name: "llm-ring", Namespace: ns, Revision: 1, IsInstall: true},
		chartutil.DefaultCapabilities)
	if err != nil {
		t.Fatalf("helm: values: %v", err)
	}
	files, err := engine.Render(ch, rv)
	if err != nil {
		t.Fatalf("helm template: %v", err)
	}
	var out []*unstructured.Unstructured
	for _, name := range sortedKeys(files) {
		if !strings.HasSuffix(name, ".yaml") {
			continue // NOTES.txt, _helpers.tpl
		}
		docs, err := splitYAML([]byte(files[name]))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		for _, doc := range docs {
			js, err := yaml.YAMLToJSON(doc)
			if err != nil {
				t.Fatalf("%s: %v\n%s", name, err, doc)
			}
			u := &unstructured.Unstructured{}
			if err := u.UnmarshalJSON(js); err != nil {
				t.Fatalf("%s: %v\n%s", name, err, doc)
			}
			out = append(out, u)
		}
	}
	sort.Slice(out, func(i, j int) bool { return objKey(out[i]) < objKey(out[j]) })
	return out
}

func objKey(u *unstructured.Unstructured) string { return u.GetKind() + "/" + u.GetName() }

// TestHelmLint: `helm lint` (strict: warnings fail too) with the default
// values and with monitoring on.
func TestHelmLint(t *testing.T) {
	for _, vals := range []map[string]any{nil, monitoringOn()} {
		l := lint.All(chartDir, vals, "llm-ring", false)
		for _, m := range l.Messages {
			if m.Severity > support.InfoSev {
				t.Errorf("helm lint: %s", m)
			}
		}
	}
}

func monitoringOn() map[string]any {
	return map[string]any{"monitoring": map[string]any{
		"serviceMonitor": map[string]any{"enabled": true}, "prometheusRule": map[string]any{"enabled": true}}}
}

// TestHelmMatchesKustomize: with its defaults, in namespace llm-ring, the
// chart renders exactly the router objects of deploy/k8s/base: the same
// kinds and names, the same specs; Helm's labels and the pods' config
// checksum aside, and router.yaml equal as the router reads it.
func TestHelmMatchesKustomize(t *testing.T) {
	chart := map[string]*unstructured.Unstructured{}
	for _, u := range helmTemplate(t, "llm-ring", nil) {
		if u.GetKind() == "Secret" {
			t.Errorf("the chart creates Secret %s: Secrets are referenced, never created from values", u.GetName())
		}
		chart[objKey(u)] = u
	}
	want := map[string]*unstructured.Unstructured{}
	for _, u := range render(t, baseDir) {
		if u.GetLabels()["app.kubernetes.io/name"] == "router" {
			want[objKey(u)] = u
		}
	}
	if got, exp := sortedKeys(chart), sortedKeys(want); !slices.Equal(got, exp) {
		t.Fatalf("the chart renders %v, deploy/k8s/base has %v", got, exp)
	}
	for k, w := range want {
		c := chart[k].DeepCopy()
		w = w.DeepCopy()
		stripHelm(t, c)
		if c.GetKind() == "ConfigMap" {
			compareRouterYAML(t, c, w)
		}
		if !reflect.DeepEqual(c.Object, w.Object) {
			cj, _ := yaml.Marshal(c.Object)
			wj, _ := yaml.Marshal(w.Object)
			t.Errorf("%s differs from deploy/k8s/base:\n--- chart\n%s\n--- kustomize\n%s", k, cj, wj)
		}
	}
}

// stripHelm removes what only the chart adds.
func stripHelm(t *testing.T, u *unstructured.Unstructured) {
	t.Helper()
	labels := u.GetLabels()
	for _, l := range helmLabels {
		if labels[l] == "" {
			t.Errorf("%s: no label %s", objKey(u), l)
		}
		delete(labels, l)
	}
	u.SetLabels(labels)
	if u.GetKind() != "Deployment" {
		return
	}
	tl, _, _ := unstructured.NestedStringMap(u.Object, "spec", "template", "metadata", "labels")
	for _, l := range helmLabels {
		delete(tl, l)
	}
	unstructured.SetNestedStringMap(u.Object, tl, "spec", "template", "metadata", "labels")
	ann, _, _ := unstructured.NestedStringMap(u.Object, "spec", "template", "metadata", "annotations")
	if len(ann["checksum/config"]) != 64 {
		t.Errorf("the router pods carry no checksum/config annotation: %v", ann)
	}
	delete(ann, "checksum/config")
	if len(ann) == 0 {
		unstructured.RemoveNestedField(u.Object, "spec", "template", "metadata", "annotations")
	}
}

// compareRouterYAML: both ConfigMaps' router.yaml load (with the router's
// own strict parser) to the same configuration; then the texts are set
// equal so that the rest of the objects can be compared.
func compareRouterYAML(t *testing.T, chart, kust *unstructured.Unstructured) {
	t.Helper()
	load := func(u *unstructured.Unstructured) *config.Router {
		text, _, _ := unstructured.NestedString(u.Object, "data", "router.yaml")
		path := filepath.Join(t.TempDir(), "router.yaml")
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		c, err := config.Load(path)
		if err != nil {
			t.Fatalf("%s: router.yaml: %v\n%s", objKey(u), err, text)
		}
		return c
	}
	if c, k := load(chart), load(kust); !reflect.DeepEqual(c, k) {
		cj, _ := yaml.Marshal(c)
		kj, _ := yaml.Marshal(k)
		t.Errorf("router.yaml differs:\n--- chart\n%s\n--- kustomize\n%s", cj, kj)
	}
	text, _, _ := unstructured.NestedString(kust.Object, "data", "router.yaml")
	unstructured.SetNestedField(chart.Object, text, "data", "router.yaml")
}

// TestHelmMonitoring: with monitoring on, a ServiceMonitor scrapes the
// router Service's http port and a PrometheusRule carries the rules of
// deploy/monitoring (its copy in the chart is the same file).
func TestHelmMonitoring(t *testing.T) {
	src, err := os.ReadFile(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	cp, err := os.ReadFile(filepath.Join(chartDir, "files", "llm-ring-rules.yaml"))
	if err != nil || string(cp) != string(src) {
		t.Fatalf("%s/files/llm-ring-rules.yaml is not a copy of %s (cp %s %s/files/)", chartDir, rulesFile, rulesFile, chartDir)
	}
	var rules map[string]any
	if err := yaml.Unmarshal(src, &rules); err != nil {
		t.Fatal(err)
	}
	var sm, pr *unstructured.Unstructured
	for _, u := range helmTemplate(t, "llm-ring", monitoringOn()) {
		switch u.GetKind() {
		case "ServiceMonitor":
			sm = u
		case "PrometheusRule":
			pr = u
		}
	}
	if sm == nil || pr == nil || sm.GetAPIVersion() != "monitoring.coreos.com/v1" || pr.GetAPIVersion() != "monitoring.coreos.com/v1" {
		t.Fatalf("ServiceMonitor %v, PrometheusRule %v", sm, pr)
	}
	eps, _, _ := unstructured.NestedSlice(sm.Object, "spec", "endpoints")
	sel, _, _ := unstructured.NestedStringMap(sm.Object, "spec", "selector", "matchLabels")
	if len(eps) != 1 || eps[0].(map[string]any)["port"] != "http" || eps[0].(map[string]any)["path"] != "/metrics" || sel["app.kubernetes.io/name"] != "router" {
		t.Errorf("ServiceMonitor spec: %v", sm.Object["spec"])
	}
	spec, _, _ := unstructured.NestedMap(pr.Object, "spec")
	if !reflect.DeepEqual(spec, rules) {
		t.Errorf("PrometheusRule spec is not %s", rulesFile)
	}
	for _, u := range helmTemplate(t, "llm-ring", nil) {
		if strings.HasPrefix(u.GetAPIVersion(), "monitoring.coreos.com/") {
			t.Errorf("%s rendered with monitoring off (it needs the Prometheus Operator's CRDs)", objKey(u))
		}
	}
}

// TestHelmAppliesToAPIServer: the rendered chart (in a namespace of its
// own, another release namespace than the kustomize one) is applied to a
// real API server and read back.
func TestHelmAppliesToAPIServer(t *testing.T) {
	cfg := controlPlane(t)
	warn := &warnings{}
	cfg.WarningHandler = warn
	c := newClient(t, cfg)
	ctx := testContext(t)
	const ns = "llm-ring-helm"
	// The namespace as deploy/k8s makes it (Pod Security "restricted").
	for _, u := range render(t, baseDir) {
		if u.GetKind() == "Namespace" {
			u.SetName(ns)
			applyNamespace(ctx, t, c, []*unstructured.Unstructured{u})
		}
	}
	warn.take()
	objs := helmTemplate(t, ns, nil)
	for _, u := range objs {
		if u.GetNamespace() != ns {
			t.Errorf("%s in namespace %q, want the release's %q", objKey(u), u.GetNamespace(), ns)
		}
		if err := applyObject(ctx, c, u, false); err != nil {
			t.Errorf("%s: rejected: %v", objKey(u), err)
		}
		if w := warn.take(); len(w) > 0 {
			t.Errorf("%s: API server warnings: %q", objKey(u), w)
		}
		got := &unstructured.Unstructured{}
		got.SetGroupVersionKind(u.GroupVersionKind())
		if err := c.Get(ctx, client.ObjectKeyFromObject(u), got); err != nil {
			t.Errorf("%s: not stored: %v", objKey(u), err)
		}
	}
	if len(objs) < 8 {
		t.Errorf("only %d objects rendered", len(objs))
	}
}

// TestHelmPodsOnlyForLabels: the router may read pods only when the
// replicas' models come from their labels (model_source: labels).
func TestHelmPodsOnlyForLabels(t *testing.T) {
	readsPods := func(objs []*unstructured.Unstructured) bool {
		for _, u := range objs {
			if u.GetKind() != "Role" {
				continue
			}
			rules, _, _ := unstructured.NestedSlice(u.Object, "rules")
			for _, r := range rules {
				res, _, _ := unstructured.NestedStringSlice(r.(map[string]any), "resources")
				if slices.Contains(res, "pods") {
					return true
				}
			}
		}
		return false
	}
	if readsPods(helmTemplate(t, "llm-ring", nil)) {
		t.Error("the default chart lets the router read pods")
	}
	labels := map[string]any{"config": map[string]any{"discovery": map[string]any{"model_source": "labels"}}}
	if !readsPods(helmTemplate(t, "llm-ring", labels)) {
		t.Error("with model_source labels the router cannot read the pods' labels")
	}
}
