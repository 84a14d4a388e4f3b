package deploy

import (
	"bytes"
	"go/ast"
	"go/parser"
	"go/token"
	"net"
	"os"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"

	"github.com/llm-ring/llm-ring/internal/config"
	"github.com/llm-ring/llm-ring/internal/traffic"
	"github.com/llm-ring/llm-ring/profiles"
)

// The names the manifests and the code agree on.
const (
	namespace     = "llm-ring"
	replicaSet    = "llm"           // StatefulSet and headless Service of the replicas
	replicaConfig = "llm-config"    // ConfigMap of the replica settings
	routerName    = "router"        // Deployment, Service and ServiceAccount of the router
	routerConfig  = "router-config" // ConfigMap holding router.yaml
	localImage    = "llm-ring:0.1.0"
)

// contextMargin: a profile's max_context_tokens may use at most this share
// of a slot's context. The generator estimates tokens at ~4 characters each;
// real tokenizers can count ~10% more on the same text.
const contextMargin = 0.9

// Every YAML file under deploy/k8s parses into typed objects (or, for the
// overlay's JSON patch, into patch operations), with unknown fields rejected.
func TestManifestFilesParse(t *testing.T) {
	for _, f := range manifestFiles(t) {
		t.Run(f, func(t *testing.T) {
			data, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			switch path.Base(f) {
			case "kustomization.yaml":
				return // read by kustomize in every other test
			case "llm.yaml": // the sim overlay's JSON 6902 patch
				var ops []struct {
					Op    string `json:"op"`
					Path  string `json:"path"`
					Value any    `json:"value,omitempty"`
				}
				if err := yaml.UnmarshalStrict(data, &ops); err != nil || len(ops) == 0 {
					t.Fatalf("not a JSON patch: %v", err)
				}
				for _, op := range ops {
					if op.Op == "replace" && op.Path == "/spec/template/spec/containers/0" {
						js, _ := yaml.Marshal(op.Value)
						var c corev1.Container
						if err := yaml.UnmarshalStrict(js, &c); err != nil {
							t.Fatalf("replacement container: %v", err)
						}
					}
				}
				return
			}
			docs, err := splitYAML(data)
			if err != nil {
				t.Fatal(err)
			}
			if len(docs) == 0 {
				t.Fatal("no objects")
			}
			for i, doc := range docs {
				if _, err := decodeStrict(doc); err != nil {
					t.Fatalf("document %d: %v", i, err)
				}
			}
		})
	}
}

// Both kustomizations render the same system, the overlay swapping the
// replica container; the checks below run on each.
func TestRenderedSystems(t *testing.T) {
	for _, dir := range []string{baseDir, simDir} {
		t.Run(dir, func(t *testing.T) {
			s := load(t, dir)
			t.Run("namespaced", func(t *testing.T) { checkNamespaced(t, s) })
			t.Run("selectors", func(t *testing.T) { checkSelectors(t, s) })
			t.Run("service ports", func(t *testing.T) { checkServicePorts(t, s) })
			t.Run("references", func(t *testing.T) { checkReferences(t, s) })
			t.Run("pod security", func(t *testing.T) { checkPodSecurity(t, s) })
			t.Run("images pinned", func(t *testing.T) { checkImages(t, s) })
			t.Run("rbac least privilege", func(t *testing.T) { checkRBAC(t, s) })
			t.Run("router", func(t *testing.T) { checkRouter(t, s) })
			t.Run("replicas", func(t *testing.T) { checkReplicas(t, s) })
			t.Run("profiles fit the slots", func(t *testing.T) { checkProfilesFit(t, s) })
		})
	}
}

func checkNamespaced(t *testing.T, s *system) {
	if _, ok := s.namespaces[namespace]; !ok || len(s.namespaces) != 1 {
		t.Fatalf("want exactly the namespace %q, got %v", namespace, sortedKeys(s.namespaces))
	}
	if got := s.namespaces[namespace].Labels["pod-security.kubernetes.io/enforce"]; got != "restricted" {
		t.Errorf("namespace enforces pod security %q, want restricted", got)
	}
	for _, o := range s.objects {
		if o.GetKind() != "Namespace" && o.GetNamespace() != namespace {
			t.Errorf("%s %s is in namespace %q, want %q", o.GetKind(), o.GetName(), o.GetNamespace(), namespace)
		}
	}
}

// Each workload's selector matches its own pods; each Service and the PDB
// select the pods of exactly one workload.
func checkSelectors(t *testing.T, s *system) {
	ws := s.workloads()
	for _, w := range ws {
		if len(w.selector) == 0 {
			t.Errorf("%s %s: empty selector", w.kind, w.name)
		}
		if !labels.SelectorFromSet(w.selector).Matches(labels.Set(w.template.Labels)) {
			t.Errorf("%s %s: selector %v does not match its pod labels %v", w.kind, w.name, w.selector, w.template.Labels)
		}
	}
	selects := func(sel labels.Selector) []string {
		var names []string
		for _, w := range ws {
			if sel.Matches(labels.Set(w.template.Labels)) {
				names = append(names, w.name)
			}
		}
		return names
	}
	for _, n := range sortedKeys(s.services) {
		svc := s.services[n]
		if len(svc.Spec.Selector) == 0 {
			t.Errorf("Service %s: no selector", n)
			continue
		}
		// A Service selects the workload of its name; <name>-peers (the
		// routers' headless gossip Service) selects <name>'s.
		want := strings.TrimSuffix(n, "-peers")
		if got := selects(labels.SelectorFromSet(svc.Spec.Selector)); !slices.Equal(got, []string{want}) {
			t.Errorf("Service %s selects the pods of %v, want [%s]", n, got, want)
		}
	}
	for _, n := range sortedKeys(s.pdbs) {
		sel, err := metav1.LabelSelectorAsSelector(s.pdbs[n].Spec.Selector)
		if err != nil {
			t.Fatal(err)
		}
		if got := selects(sel); !slices.Equal(got, []string{n}) {
			t.Errorf("PodDisruptionBudget %s selects %v, want [%s]", n, got, n)
		}
	}
	sts := s.statefulSets[replicaSet]
	if sts == nil {
		t.Fatalf("no StatefulSet %s", replicaSet)
	}
	if svc := s.services[sts.Spec.ServiceName]; svc == nil || svc.Spec.ClusterIP != corev1.ClusterIPNone {
		t.Errorf("StatefulSet %s: serviceName %q is not a headless Service", replicaSet, sts.Spec.ServiceName)
	}
}

// Every Service port reaches a container port of the pods it selects, by
// name or number, with the same protocol.
func checkServicePorts(t *testing.T, s *system) {
	for _, w := range s.workloads() {
		svc := s.services[w.name]
		if svc == nil {
			t.Errorf("%s %s has no Service", w.kind, w.name)
			continue
		}
		for _, sp := range svc.Spec.Ports {
			if sp.Name == "" {
				t.Errorf("Service %s: port %d has no name (discovery finds ports by name)", svc.Name, sp.Port)
			}
			found := false
			for _, c := range w.template.Spec.Containers {
				for _, cp := range c.Ports {
					match := sp.TargetPort.Type == intstr.String && sp.TargetPort.StrVal == cp.Name ||
						sp.TargetPort.Type == intstr.Int && sp.TargetPort.IntVal == cp.ContainerPort
					if match && protocol(sp.Protocol) == protocol(cp.Protocol) {
						found = true
					}
				}
			}
			if !found {
				t.Errorf("Service %s port %s: targetPort %s matches no container port of %s %s",
					svc.Name, sp.Name, sp.TargetPort.String(), w.kind, w.name)
			}
		}
	}
}

func protocol(p corev1.Protocol) corev1.Protocol {
	if p == "" {
		return corev1.ProtocolTCP
	}
	return p
}

// ConfigMaps, ServiceAccounts and Roles that objects name exist.
func checkReferences(t *testing.T, s *system) {
	for _, w := range s.workloads() {
		spec := &w.template.Spec
		if sa := spec.ServiceAccountName; sa != "" && s.accounts[sa] == nil {
			t.Errorf("%s %s: ServiceAccount %q does not exist", w.kind, w.name, sa)
		}
		for _, v := range spec.Volumes {
			if v.ConfigMap != nil && s.configMaps[v.ConfigMap.Name] == nil {
				t.Errorf("%s %s: volume %s: ConfigMap %q does not exist", w.kind, w.name, v.Name, v.ConfigMap.Name)
			}
		}
		for _, c := range allContainers(spec) {
			for _, e := range c.EnvFrom {
				if e.ConfigMapRef != nil && s.configMaps[e.ConfigMapRef.Name] == nil {
					t.Errorf("%s %s: container %s: ConfigMap %q does not exist", w.kind, w.name, c.Name, e.ConfigMapRef.Name)
				}
			}
			for _, m := range c.VolumeMounts {
				if !slices.ContainsFunc(spec.Volumes, func(v corev1.Volume) bool { return v.Name == m.Name }) &&
					!hasClaimTemplate(s, w, m.Name) {
					t.Errorf("%s %s: container %s mounts unknown volume %q", w.kind, w.name, c.Name, m.Name)
				}
			}
		}
	}
	for _, n := range sortedKeys(s.bindings) {
		b := s.bindings[n]
		if b.RoleRef.Kind != "Role" || s.roles[b.RoleRef.Name] == nil {
			t.Errorf("RoleBinding %s: role %s %q does not exist", n, b.RoleRef.Kind, b.RoleRef.Name)
		}
		for _, sub := range b.Subjects {
			if sub.Kind != rbacv1.ServiceAccountKind || s.accounts[sub.Name] == nil || sub.Namespace != namespace {
				t.Errorf("RoleBinding %s: subject %s %s/%s is not one of our ServiceAccounts", n, sub.Kind, sub.Namespace, sub.Name)
			}
		}
	}
}

func hasClaimTemplate(s *system, w workload, name string) bool {
	sts := s.statefulSets[w.name]
	return w.kind == "StatefulSet" && sts != nil &&
		slices.ContainsFunc(sts.Spec.VolumeClaimTemplates, func(c corev1.PersistentVolumeClaim) bool { return c.Name == name })
}

func allContainers(spec *corev1.PodSpec) []corev1.Container {
	return slices.Concat(spec.InitContainers, spec.Containers)
}

// Every pod meets the "restricted" Pod Security Standard the namespace
// enforces, and every container states CPU and memory requests and limits.
func checkPodSecurity(t *testing.T, s *system) {
	for _, w := range s.workloads() {
		spec := &w.template.Spec
		psc := spec.SecurityContext
		if psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot {
			t.Errorf("%s %s: pod must set runAsNonRoot: true", w.kind, w.name)
		}
		if psc == nil || psc.RunAsUser == nil || *psc.RunAsUser == 0 {
			t.Errorf("%s %s: pod must run as a non-zero runAsUser", w.kind, w.name)
		}
		if psc == nil || psc.SeccompProfile == nil || psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
			t.Errorf("%s %s: pod must use the RuntimeDefault seccomp profile", w.kind, w.name)
		}
		for _, c := range allContainers(spec) {
			sc := c.SecurityContext
			where := w.kind + " " + w.name + ": container " + c.Name
			if sc == nil || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
				t.Errorf("%s: allowPrivilegeEscalation must be false", where)
			}
			if sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
				t.Errorf("%s: readOnlyRootFilesystem must be true", where)
			}
			if sc == nil || sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(sc.Capabilities.Add) > 0 {
				t.Errorf("%s: must drop ALL capabilities and add none", where)
			}
			if sc != nil && sc.Privileged != nil && *sc.Privileged {
				t.Errorf("%s: must not be privileged", where)
			}
			for _, r := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
				req, lim := c.Resources.Requests[r], c.Resources.Limits[r]
				if req.IsZero() || lim.IsZero() {
					t.Errorf("%s: %s request and limit must both be set", where, r)
				} else if req.Cmp(lim) > 0 {
					t.Errorf("%s: %s request %s above its limit %s", where, r, req.String(), lim.String())
				}
			}
		}
	}
}

// imageRef: a registry path with a tag (not "latest") or a digest.
var imageRef = regexp.MustCompile(`^([a-z0-9.-]+(:[0-9]+)?/)?[a-z0-9][a-z0-9._/-]*(:[A-Za-z0-9_][A-Za-z0-9._-]{0,127})?(@sha256:[a-f0-9]{64})?$`)

func pinned(image string) bool {
	if !imageRef.MatchString(image) {
		return false
	}
	if strings.Contains(image, "@sha256:") {
		return true
	}
	name, tag, ok := strings.Cut(image[strings.LastIndex(image, "/")+1:], ":")
	return ok && name != "" && tag != "" && tag != "latest"
}

// Every image is pinned; our own image is loaded into kind, never pulled.
func checkImages(t *testing.T, s *system) {
	for _, w := range s.workloads() {
		for _, c := range allContainers(&w.template.Spec) {
			if !pinned(c.Image) {
				t.Errorf("%s %s: container %s: image %q is not pinned to a tag or digest", w.kind, w.name, c.Name, c.Image)
			}
			if c.ImagePullPolicy != corev1.PullIfNotPresent {
				t.Errorf("%s %s: container %s: imagePullPolicy %q, want IfNotPresent (kind load docker-image)", w.kind, w.name, c.Name, c.ImagePullPolicy)
			}
		}
	}
}

func TestPinned(t *testing.T) {
	tests := []struct {
		image string
		want  bool
	}{
		{"llm-ring:0.1.0", true},                                             // our image, by tag
		{"ghcr.io/ggml-org/llama.cpp:server-b11176", true},                   // registry, path and tag
		{"localhost:5000/llm-ring:0.1.0", true},                              // a registry port is not a tag
		{"localhost:5000/llm-ring", false},                                   // ... so this has no tag
		{"llm-ring", false},                                                  // no tag: whatever latest is
		{"llm-ring:latest", false},                                           // latest moves
		{"gcr.io/distroless/static@sha256:" + strings.Repeat("a", 64), true}, // digest
		{"Bad Image", false},                                                 // not a reference
	}
	for _, tt := range tests {
		if got := pinned(tt.image); got != tt.want {
			t.Errorf("pinned(%q) = %v, want %v", tt.image, got, tt.want)
		}
	}
}

// The router may get, list and watch EndpointSlices in its namespace; that
// is the only permission in the manifests.
func checkRBAC(t *testing.T, s *system) {
	want := []rbacv1.PolicyRule{{
		APIGroups: []string{"discovery.k8s.io"},
		Resources: []string{"endpointslices"},
		Verbs:     []string{"get", "list", "watch"},
	}}
	if len(s.roles) != 1 {
		t.Fatalf("want one Role, got %v", sortedKeys(s.roles))
	}
	for n, r := range s.roles {
		if len(r.Rules) != 1 || !slices.Equal(r.Rules[0].APIGroups, want[0].APIGroups) ||
			!slices.Equal(r.Rules[0].Resources, want[0].Resources) || !slices.Equal(r.Rules[0].Verbs, want[0].Verbs) ||
			len(r.Rules[0].ResourceNames) > 0 || len(r.Rules[0].NonResourceURLs) > 0 {
			t.Errorf("Role %s: rules %+v, want exactly %+v", n, r.Rules, want)
		}
	}
	for _, w := range s.workloads() {
		sa := w.template.Spec.ServiceAccountName
		mounts := w.template.Spec.AutomountServiceAccountToken
		switch {
		case w.name == routerName && sa != routerName:
			t.Errorf("the router runs as ServiceAccount %q, want %q", sa, routerName)
		case w.name != routerName && (mounts == nil || *mounts):
			t.Errorf("%s %s needs no API access: set automountServiceAccountToken: false", w.kind, w.name)
		}
	}
}

// The router's configuration passes the router's own validation and points
// at the replicas' Service and port; the Deployment serves what the probes
// and the Service expect.
func checkRouter(t *testing.T, s *system) {
	cm := s.configMaps[routerConfig]
	if cm == nil {
		t.Fatalf("no ConfigMap %s", routerConfig)
	}
	cfg, err := config.Parse([]byte(cm.Data["router.yaml"]))
	if err != nil {
		t.Fatalf("ConfigMap %s: router.yaml: %v", routerConfig, err)
	}
	k := cfg.Discovery.Kubernetes
	if cfg.Discovery.Mode != "kubernetes" || k == nil {
		t.Fatalf("router.yaml: discovery.mode %q, want kubernetes", cfg.Discovery.Mode)
	}
	if k.Namespace != namespace || k.Kubeconfig != "" {
		t.Errorf("router.yaml: discovery.kubernetes namespace %q kubeconfig %q, want %q and in-cluster", k.Namespace, k.Kubeconfig, namespace)
	}
	svc := s.services[k.Service]
	if svc == nil || !labels.SelectorFromSet(svc.Spec.Selector).Matches(labels.Set(s.statefulSets[replicaSet].Spec.Template.Labels)) {
		t.Errorf("router.yaml: discovery.kubernetes.service %q is not the replicas' Service", k.Service)
	} else if !slices.ContainsFunc(svc.Spec.Ports, func(p corev1.ServicePort) bool { return p.Name == k.PortName }) {
		t.Errorf("router.yaml: discovery.kubernetes.port_name %q is not a port of Service %s", k.PortName, svc.Name)
	}

	d := s.deployments[routerName]
	if d == nil || len(d.Spec.Template.Spec.Containers) != 1 {
		t.Fatalf("want a Deployment %s with one container", routerName)
	}
	checkRouterCluster(t, s, cfg, d) // issue 13: cluster_test.go
	c := d.Spec.Template.Spec.Containers[0]
	if c.Image != localImage {
		t.Errorf("router image %q, want %q", c.Image, localImage)
	}
	if len(c.Args) != 3 || c.Args[0] != "router" || c.Args[1] != "--config" {
		t.Fatalf("router args %q, want [router --config FILE]", c.Args)
	}
	checkSubcommandFlags(t, "router", c.Args[1:])
	dir, file := path.Split(c.Args[2])
	mounted := false
	for _, m := range c.VolumeMounts {
		for _, v := range d.Spec.Template.Spec.Volumes {
			if v.Name == m.Name && v.ConfigMap != nil && v.ConfigMap.Name == routerConfig && path.Clean(m.MountPath) == path.Clean(dir) {
				mounted = true
			}
		}
	}
	if !mounted || cm.Data[file] == "" {
		t.Errorf("--config %s is not the key %s of ConfigMap %s mounted at %s", c.Args[2], file, routerConfig, dir)
	}
	_, port, err := net.SplitHostPort(cfg.Listen)
	if err != nil {
		t.Fatalf("router.yaml: listen: %v", err)
	}
	if host, _, _ := net.SplitHostPort(cfg.Listen); host != "0.0.0.0" && host != "" {
		t.Errorf("router.yaml: listen %q is not reachable from outside the pod", cfg.Listen)
	}
	if p := namedPort(c, "http"); p == 0 || strconv.Itoa(int(p)) != port {
		t.Errorf("router container port http = %d, router.yaml listens on %s", p, port)
	}
	for _, probe := range []struct {
		name string
		p    *corev1.Probe
		path string
	}{{"liveness", c.LivenessProbe, "/healthz"}, {"readiness", c.ReadinessProbe, "/readyz"}} {
		if probe.p == nil || probe.p.HTTPGet == nil || probe.p.HTTPGet.Path != probe.path || probe.p.HTTPGet.Port.String() != "http" {
			t.Errorf("router %s probe must be GET %s on port http", probe.name, probe.path)
		}
	}
	if g := d.Spec.Template.Spec.TerminationGracePeriodSeconds; g == nil || float64(*g) <= (cfg.ShutdownDelay.D()+cfg.ShutdownGrace.D()).Seconds() {
		t.Errorf("terminationGracePeriodSeconds must exceed shutdown_delay + shutdown_grace (%s + %s)", cfg.ShutdownDelay.D(), cfg.ShutdownGrace.D())
	}
	checkRouterDrain(t, cfg, c)
	checkRouterAdmin(t, s, cfg, d, c)
}

// Issue 10, draining: readiness must fail (and Kubernetes remove the
// endpoint) within shutdown_delay, while the listener still serves.
func checkRouterDrain(t *testing.T, cfg *config.Router, c corev1.Container) {
	if cfg.ShutdownDelay <= 0 {
		t.Errorf("router.yaml: shutdown_delay is 0: the listener would close while endpoints still send traffic")
	}
	if p := c.ReadinessProbe; p != nil {
		if fail := time.Duration(p.PeriodSeconds*p.FailureThreshold) * time.Second; fail > cfg.ShutdownDelay.D() {
			t.Errorf("the readiness probe notices a draining router after %s, longer than shutdown_delay %s", fail, cfg.ShutdownDelay.D())
		}
	}
}

// Issue 10, the admin API apart: it listens on its own container port, which
// no Service exposes; its token comes from a mounted Secret; a NetworkPolicy
// lets everyone reach the client port and only labelled pods the admin port.
func checkRouterAdmin(t *testing.T, s *system, cfg *config.Router, d *appsv1.Deployment, c corev1.Container) {
	if cfg.Admin.Listen == "" {
		t.Fatal("router.yaml: admin.listen is empty: the runner cannot switch policies")
	}
	_, port, err := net.SplitHostPort(cfg.Admin.Listen)
	if err != nil {
		t.Fatalf("router.yaml: admin.listen: %v", err)
	}
	if p := namedPort(c, "admin"); p == 0 || strconv.Itoa(int(p)) != port {
		t.Errorf("router container port admin = %d, router.yaml admin.listen is %s", p, cfg.Admin.Listen)
	}
	for _, svc := range s.services {
		if !labels.SelectorFromSet(svc.Spec.Selector).Matches(labels.Set(d.Spec.Template.Labels)) {
			continue
		}
		for _, sp := range svc.Spec.Ports {
			if sp.TargetPort.String() == "admin" || sp.TargetPort.String() == port {
				t.Errorf("Service %s exposes the admin port (%s)", svc.Name, sp.Name)
			}
		}
	}
	// The token file is in a mounted Secret that the manifests or a
	// template (created by hand: no token comes from git) define.
	dir, _ := path.Split(cfg.Admin.TokenFile)
	found := false
	for _, m := range c.VolumeMounts {
		if path.Clean(m.MountPath) != path.Clean(dir) {
			continue
		}
		for _, v := range d.Spec.Template.Spec.Volumes {
			if v.Name == m.Name && v.Secret != nil {
				sec := s.secrets[v.Secret.SecretName]
				if sec == nil {
					sec = secretTemplate(t, v.Secret.SecretName)
				}
				if sec == nil {
					t.Errorf("admin token volume: Secret %q does not exist", v.Secret.SecretName)
				} else {
					found = true // its key is created by hand (the template says how); no token comes from git
				}
			}
		}
	}
	if !found {
		t.Errorf("admin.token_file %s is not a key of a Secret mounted at %s", cfg.Admin.TokenFile, dir)
	}
	// The NetworkPolicy.
	var np *networkingv1.NetworkPolicy
	for _, p := range s.netpols {
		sel, err := metav1.LabelSelectorAsSelector(&p.Spec.PodSelector)
		if err == nil && sel.Matches(labels.Set(d.Spec.Template.Labels)) {
			np = p
		}
	}
	if np == nil {
		t.Fatal("no NetworkPolicy selects the router's pods")
	}
	if !slices.Contains(np.Spec.PolicyTypes, networkingv1.PolicyTypeIngress) {
		t.Errorf("NetworkPolicy %s does not restrict ingress", np.Name)
	}
	openTo := func(portName string) (anyone, some bool) {
		for _, rule := range np.Spec.Ingress {
			for _, p := range rule.Ports {
				if p.Port != nil && p.Port.String() == portName {
					if len(rule.From) == 0 {
						anyone = true
					} else {
						some = true
					}
				}
			}
		}
		return anyone, some
	}
	if anyone, _ := openTo("http"); !anyone {
		t.Errorf("NetworkPolicy %s does not let clients reach the router's http port", np.Name)
	}
	if anyone, some := openTo("admin"); anyone || !some {
		t.Errorf("NetworkPolicy %s: the admin port must be open to selected pods only (anyone %v, selected %v)", np.Name, anyone, some)
	}
}

func namedPort(c corev1.Container, name string) int32 {
	for _, p := range c.Ports {
		if p.Name == name {
			return p.ContainerPort
		}
	}
	return 0
}

// The replicas: spread over worker nodes, ready only when /health says the
// model is loaded, listening where the Service points; in the sim overlay,
// `llm-ring replica` takes its settings from the same ConfigMap and its
// name from the pod, so the router's ring names are pod names.
func checkReplicas(t *testing.T, s *system) {
	sts := s.statefulSets[replicaSet]
	spec := &sts.Spec.Template.Spec
	if len(spec.Containers) != 1 {
		t.Fatalf("StatefulSet %s: want one container", replicaSet)
	}
	c := spec.Containers[0]
	cm := s.configMaps[replicaConfig]
	if cm == nil {
		t.Fatalf("no ConfigMap %s", replicaConfig)
	}
	if !slices.ContainsFunc(c.EnvFrom, func(e corev1.EnvFromSource) bool {
		return e.ConfigMapRef != nil && e.ConfigMapRef.Name == replicaConfig
	}) {
		t.Errorf("replica container does not read ConfigMap %s", replicaConfig)
	}
	if p := namedPort(c, "http"); p == 0 || strconv.Itoa(int(p)) != cm.Data["LLAMA_ARG_PORT"] {
		t.Errorf("replica container port http = %d, LLAMA_ARG_PORT = %q", p, cm.Data["LLAMA_ARG_PORT"])
	}
	if c.ReadinessProbe == nil || c.ReadinessProbe.HTTPGet == nil || c.ReadinessProbe.HTTPGet.Path != "/health" {
		t.Errorf("replica readiness must be GET /health (503 while the model loads)")
	}
	if c.StartupProbe == nil || c.LivenessProbe == nil {
		t.Errorf("replica needs a startup probe (model load) before its liveness probe")
	}
	spread := false
	for _, tsc := range spec.TopologySpreadConstraints {
		sel, err := metav1.LabelSelectorAsSelector(tsc.LabelSelector)
		if err == nil && tsc.TopologyKey == corev1.LabelHostname && tsc.MaxSkew == 1 &&
			sel.Matches(labels.Set(sts.Spec.Template.Labels)) &&
			tsc.NodeTaintsPolicy != nil && *tsc.NodeTaintsPolicy == corev1.NodeInclusionPolicyHonor {
			spread = true
		}
	}
	if !spread {
		t.Errorf("replicas must spread over nodes (hostname, maxSkew 1, tainted control plane not counted)")
	}

	switch {
	case strings.Contains(c.Image, "llama.cpp"): // base
		if len(spec.InitContainers) != 1 || cm.Data["MODEL_URL"] == "" || !strings.HasPrefix(cm.Data["LLAMA_ARG_MODEL"], "/models/") {
			t.Errorf("base: the model must be fetched once into the replica's /models volume")
		}
		if len(sts.Spec.VolumeClaimTemplates) != 1 {
			t.Errorf("base: each replica needs its own model volume")
		}
	case c.Image == localImage: // sim overlay
		if len(c.Args) == 0 || c.Args[0] != "replica" {
			t.Fatalf("sim: args %q must start with the replica subcommand", c.Args)
		}
		checkSubcommandFlags(t, "replica", c.Args[1:])
		flags := map[string]string{}
		for _, a := range c.Args[1:] {
			k, v, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
			flags[k] = v
		}
		for flag, want := range map[string]string{
			"name":          "$(POD_NAME)",
			"listen":        "0.0.0.0:$(LLAMA_ARG_PORT)",
			"ctx-size":      "$(LLAMA_ARG_CTX_SIZE)",
			"n-parallel":    "$(LLAMA_ARG_N_PARALLEL)",
			"cache-ram-mib": "$(LLAMA_ARG_CACHE_RAM)",
		} {
			if flags[flag] != want {
				t.Errorf("sim: --%s=%q, want %q (one place for replica settings)", flag, flags[flag], want)
			}
		}
		env := map[string]bool{}
		for k := range cm.Data {
			env[k] = true
		}
		for _, e := range c.Env {
			env[e.Name] = true
			if e.Name == "POD_NAME" && (e.ValueFrom == nil || e.ValueFrom.FieldRef == nil || e.ValueFrom.FieldRef.FieldPath != "metadata.name") {
				t.Errorf("sim: POD_NAME must come from metadata.name")
			}
		}
		for _, a := range c.Args {
			for _, m := range regexp.MustCompile(`\$\(([A-Za-z_][A-Za-z0-9_]*)\)`).FindAllStringSubmatch(a, -1) {
				if !env[m[1]] {
					t.Errorf("sim: argument %q uses $(%s), which the container's environment does not define", a, m[1])
				}
			}
		}
		if len(spec.InitContainers) != 0 || len(sts.Spec.VolumeClaimTemplates) != 0 {
			t.Errorf("sim: no model, so no download and no volume")
		}
	default:
		t.Fatalf("replica image %q is neither llama.cpp nor %s", c.Image, localImage)
	}
}

// The seed's "one manual link to keep", checked: every shipped traffic
// profile's max_context_tokens stays below the replicas' per-slot context
// with a margin.
func checkProfilesFit(t *testing.T, s *system) {
	cm := s.configMaps[replicaConfig]
	ctx, err1 := strconv.Atoi(cm.Data["LLAMA_ARG_CTX_SIZE"])
	par, err2 := strconv.Atoi(cm.Data["LLAMA_ARG_N_PARALLEL"])
	if err1 != nil || err2 != nil || par < 1 || ctx < par {
		t.Fatalf("ConfigMap %s: bad LLAMA_ARG_CTX_SIZE %q / LLAMA_ARG_N_PARALLEL %q", replicaConfig, cm.Data["LLAMA_ARG_CTX_SIZE"], cm.Data["LLAMA_ARG_N_PARALLEL"])
	}
	slot := ctx / par
	names := profiles.Names()
	if len(names) == 0 {
		t.Fatal("no shipped profiles")
	}
	for _, n := range names {
		data, _ := profiles.Read(n)
		p, err := traffic.ParseProfile(data)
		if err != nil {
			t.Fatalf("profile %s: %v", n, err)
		}
		if limit := int(contextMargin * float64(slot)); p.MaxContextTokens > limit {
			t.Errorf("profile %s: max_context_tokens %d above %.0f%% of the per-slot context %d/%d = %d (limit %d)",
				n, p.MaxContextTokens, 100*contextMargin, ctx, par, slot, limit)
		}
	}
}

// checkSubcommandFlags checks that every --flag of args is defined by the
// subcommand's source file, cmd/llm-ring/<cmd>.go: the manifests cannot
// drift from the binary they run.
func checkSubcommandFlags(t *testing.T, cmd string, args []string) {
	t.Helper()
	defined := definedFlags(t, "../cmd/llm-ring/"+cmd+".go")
	for _, a := range args {
		if !strings.HasPrefix(a, "-") {
			continue
		}
		name, _, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if !defined[name] {
			t.Errorf("llm-ring %s has no flag --%s (defined: %v)", cmd, name, sortedKeys(defined))
		}
	}
}

// definedFlags finds the flag names a Go file defines: the name argument of
// every fs.String/Int/Bool/Float64/Duration(...)/XxxVar(...)/Func(...) call.
func definedFlags(t *testing.T, file string) map[string]bool {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), file, nil, 0)
	if err != nil {
		t.Fatalf("reading the flags of %s: %v", file, err)
	}
	out := map[string]bool{}
	ast.Inspect(f, func(n ast.Node) bool {
		call, ok := n.(*ast.CallExpr)
		if !ok {
			return true
		}
		sel, ok := call.Fun.(*ast.SelectorExpr)
		if !ok {
			return true
		}
		if x, ok := sel.X.(*ast.Ident); !ok || x.Name != "fs" {
			return true
		}
		arg := 0
		if strings.HasSuffix(sel.Sel.Name, "Var") {
			arg = 1 // fs.IntVar(&v, "name", ...)
		}
		if len(call.Args) > arg {
			if lit, ok := call.Args[arg].(*ast.BasicLit); ok && lit.Kind == token.STRING {
				if s, err := strconv.Unquote(lit.Value); err == nil {
					out[s] = true
				}
			}
		}
		return true
	})
	if len(out) == 0 {
		t.Fatalf("%s defines no flags", file)
	}
	return out
}

// cluster/kind-config.yaml: one control plane and three workers, so the
// three replicas land on three nodes.
func TestKindConfig(t *testing.T) {
	data, err := os.ReadFile("../cluster/kind-config.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var c struct {
		Kind       string `json:"kind"`
		APIVersion string `json:"apiVersion"`
		Name       string `json:"name"`
		Nodes      []struct {
			Role string `json:"role"`
		} `json:"nodes"`
	}
	if err := yaml.UnmarshalStrict(data, &c); err != nil {
		t.Fatal(err)
	}
	if c.Kind != "Cluster" || c.APIVersion != "kind.x-k8s.io/v1alpha4" || c.Name != "llm-ring" {
		t.Errorf("kind %q apiVersion %q name %q, want Cluster kind.x-k8s.io/v1alpha4 llm-ring", c.Kind, c.APIVersion, c.Name)
	}
	roles := map[string]int{}
	for _, n := range c.Nodes {
		roles[n.Role]++
	}
	if roles["control-plane"] != 1 || roles["worker"] != 3 || len(c.Nodes) != 4 {
		t.Errorf("nodes %v, want 1 control-plane and 3 workers", roles)
	}
	sts := load(t, baseDir).statefulSets[replicaSet]
	if int(*sts.Spec.Replicas) != roles["worker"] {
		t.Errorf("%d replicas for %d workers: the study places one replica per worker", *sts.Spec.Replicas, roles["worker"])
	}
}

// The Dockerfile builds the image the manifests run: pinned bases, a static
// binary, a non-root distroless runtime whose entrypoint is llm-ring, so the
// manifests' first argument is a subcommand.
func TestDockerfile(t *testing.T) {
	data, err := os.ReadFile("../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	var froms []string
	var entrypoint, user string
	static := false
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 || strings.HasPrefix(f[0], "#") {
			continue
		}
		switch strings.ToUpper(f[0]) {
		case "FROM":
			froms = append(froms, f[1])
		case "ENTRYPOINT":
			entrypoint = strings.Join(f[1:], " ")
		case "USER":
			user = f[1]
		}
		if strings.Contains(line, "CGO_ENABLED=0") && strings.Contains(line, "go build") {
			static = true
		}
	}
	if len(froms) < 2 {
		t.Fatalf("want a multi-stage build, got FROM %v", froms)
	}
	for _, f := range froms {
		if !pinned(f) {
			t.Errorf("FROM %s is not pinned", f)
		}
	}
	if last := froms[len(froms)-1]; !strings.HasPrefix(last, "gcr.io/distroless/static") || !strings.HasSuffix(last, ":nonroot") {
		t.Errorf("runtime stage %s, want distroless static nonroot", last)
	}
	if !static {
		t.Error("the binary must be built with CGO_ENABLED=0 (static, for distroless static)")
	}
	if user == "" || strings.HasPrefix(user, "0") || strings.HasPrefix(user, "root") {
		t.Errorf("USER %q, want a non-root uid", user)
	}
	if entrypoint != `["/llm-ring"]` {
		t.Errorf("ENTRYPOINT %s, want [\"/llm-ring\"]", entrypoint)
	}
	main, err := os.ReadFile("../cmd/llm-ring/main.go")
	if err != nil {
		t.Fatal(err)
	}
	for _, sub := range []string{"router", "replica"} {
		if !bytes.Contains(main, []byte(`{"`+sub+`", `)) {
			t.Errorf("cmd/llm-ring/main.go has no %q subcommand, which the manifests run", sub)
		}
	}
}
