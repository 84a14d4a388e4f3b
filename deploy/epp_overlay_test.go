package deploy

// The EPP overlay (k8s/overlays/epp): the base system plus `llm-ring epp`,
// an InferencePool naming it, and a Gateway + HTTPRoute sending traffic to
// the pool. The Gateway API and Inference Extension kinds are decoded into
// the small typed structs below (the fields the overlay uses, with the
// APIs' names), strictly, so that a misspelt field fails here.

import (
	"encoding/json"
	"slices"
	"strconv"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/scheme"

	appsv1 "k8s.io/api/apps/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"

	"github.com/llm-ring/llm-ring/internal/config"
)

const eppDir = "k8s/overlays/epp"

type objectRef struct {
	Group     string `json:"group,omitempty"`
	Kind      string `json:"kind,omitempty"`
	Name      string `json:"name"`
	Namespace string `json:"namespace,omitempty"`
	Port      *struct {
		Number int32 `json:"number"`
	} `json:"port,omitempty"`
	FailureMode string `json:"failureMode,omitempty"`
}

// inferencePool is inference.networking.k8s.io/v1 InferencePool.
type inferencePool struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		Selector struct {
			MatchLabels map[string]string `json:"matchLabels"`
		} `json:"selector"`
		TargetPorts []struct {
			Number int32 `json:"number"`
		} `json:"targetPorts"`
		AppProtocol       string     `json:"appProtocol,omitempty"`
		EndpointPickerRef *objectRef `json:"endpointPickerRef,omitempty"`
	} `json:"spec"`
}

// gateway is gateway.networking.k8s.io/v1 Gateway.
type gateway struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		GatewayClassName string `json:"gatewayClassName"`
		Listeners        []struct {
			Name     string `json:"name"`
			Protocol string `json:"protocol"`
			Port     int32  `json:"port"`
		} `json:"listeners"`
	} `json:"spec"`
}

// httpRoute is gateway.networking.k8s.io/v1 HTTPRoute.
type httpRoute struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		ParentRefs []objectRef `json:"parentRefs"`
		Rules      []struct {
			Matches []struct {
				Path struct {
					Type  string `json:"type"`
					Value string `json:"value"`
				} `json:"path"`
			} `json:"matches"`
			BackendRefs []objectRef `json:"backendRefs"`
			Timeouts    *struct {
				Request string `json:"request"`
			} `json:"timeouts,omitempty"`
		} `json:"rules"`
	} `json:"spec"`
}

func deepCopy[T any](v *T) *T {
	b, _ := json.Marshal(v)
	out := new(T)
	json.Unmarshal(b, out)
	return out
}

func (p *inferencePool) DeepCopyObject() runtime.Object { return deepCopy(p) }
func (g *gateway) DeepCopyObject() runtime.Object       { return deepCopy(g) }
func (r *httpRoute) DeepCopyObject() runtime.Object     { return deepCopy(r) }

func init() {
	scheme.Scheme.AddKnownTypeWithName(schema.GroupVersionKind{Group: "inference.networking.k8s.io", Version: "v1", Kind: "InferencePool"}, &inferencePool{})
	scheme.Scheme.AddKnownTypeWithName(schema.GroupVersionKind{Group: "gateway.networking.k8s.io", Version: "v1", Kind: "Gateway"}, &gateway{})
	scheme.Scheme.AddKnownTypeWithName(schema.GroupVersionKind{Group: "gateway.networking.k8s.io", Version: "v1", Kind: "HTTPRoute"}, &httpRoute{})
}

// eppSystem is the rendered overlay: the base's kinds in a system, the
// gateway kinds beside it.
type eppSystem struct {
	*system
	pools    map[string]*inferencePool
	gateways map[string]*gateway
	routes   map[string]*httpRoute
}

func loadEPP(t *testing.T) *eppSystem {
	t.Helper()
	s := &eppSystem{system: &system{
		namespaces: map[string]*corev1.Namespace{}, configMaps: map[string]*corev1.ConfigMap{},
		services: map[string]*corev1.Service{}, statefulSets: map[string]*appsv1.StatefulSet{},
		deployments: map[string]*appsv1.Deployment{}, pdbs: map[string]*policyv1.PodDisruptionBudget{},
		accounts: map[string]*corev1.ServiceAccount{}, roles: map[string]*rbacv1.Role{},
		bindings: map[string]*rbacv1.RoleBinding{}, secrets: map[string]*corev1.Secret{},
		netpols: map[string]*networkingv1.NetworkPolicy{},
	}, pools: map[string]*inferencePool{}, gateways: map[string]*gateway{}, routes: map[string]*httpRoute{}}
	s.objects = render(t, eppDir)
	for _, u := range s.objects {
		doc, err := u.MarshalJSON()
		if err != nil {
			t.Fatal(err)
		}
		obj, err := decodeStrict(doc)
		if err != nil {
			t.Fatalf("%s %s: %v", u.GetKind(), u.GetName(), err)
		}
		n := u.GetName()
		switch o := obj.(type) {
		case *inferencePool:
			s.pools[n] = o
		case *gateway:
			s.gateways[n] = o
		case *httpRoute:
			s.routes[n] = o
		case *corev1.Namespace:
			s.namespaces[n] = o
		case *corev1.ConfigMap:
			s.configMaps[n] = o
		case *corev1.Service:
			s.services[n] = o
		case *appsv1.StatefulSet:
			s.statefulSets[n] = o
		case *appsv1.Deployment:
			s.deployments[n] = o
		case *policyv1.PodDisruptionBudget:
			s.pdbs[n] = o
		case *corev1.ServiceAccount:
			s.accounts[n] = o
		case *rbacv1.Role:
			s.roles[n] = o
		case *rbacv1.RoleBinding:
			s.bindings[n] = o
		case *corev1.Secret:
			s.secrets[n] = o
		case *networkingv1.NetworkPolicy:
			s.netpols[n] = o
		default:
			t.Fatalf("%s %s: kind not covered by the EPP overlay tests", u.GetKind(), n)
		}
	}
	return s
}

// The overlay passes the base's checks (namespace, selectors, ports,
// references, pod security, pinned images) and its own below.
func TestEPPOverlay(t *testing.T) {
	s := loadEPP(t)
	t.Run("namespaced", func(t *testing.T) { checkNamespaced(t, s.system) })
	t.Run("selectors", func(t *testing.T) { checkSelectors(t, s.system) })
	t.Run("service ports", func(t *testing.T) { checkServicePorts(t, s.system) })
	t.Run("references", func(t *testing.T) { checkReferences(t, s.system) })
	t.Run("pod security", func(t *testing.T) { checkPodSecurity(t, s.system) })
	t.Run("images pinned", func(t *testing.T) { checkImages(t, s.system) })
	t.Run("router kept", func(t *testing.T) { checkRouter(t, s.system) })
	t.Run("pool", func(t *testing.T) { checkPool(t, s) })
	t.Run("route", func(t *testing.T) { checkRoute(t, s) })
	t.Run("epp", func(t *testing.T) { checkEPP(t, s) })
	t.Run("epp rbac", func(t *testing.T) { checkEPPRBAC(t, s) })
}

// The pool selects the replicas' pods on their http port and names the
// EPP's Service and its grpc port.
func checkPool(t *testing.T, s *eppSystem) {
	p := s.pools["llm-pool"]
	if p == nil || len(s.pools) != 1 {
		t.Fatalf("want the InferencePool llm-pool, got %v", sortedKeys(s.pools))
	}
	sts := s.statefulSets[replicaSet]
	if !labels.SelectorFromSet(p.Spec.Selector.MatchLabels).Matches(labels.Set(sts.Spec.Template.Labels)) {
		t.Errorf("pool selector %v does not match the replicas' pods %v", p.Spec.Selector.MatchLabels, sts.Spec.Template.Labels)
	}
	if len(p.Spec.TargetPorts) != 1 || p.Spec.TargetPorts[0].Number != namedPort(sts.Spec.Template.Spec.Containers[0], "http") {
		t.Errorf("pool targetPorts %+v, want the replicas' http port", p.Spec.TargetPorts)
	}
	ref := p.Spec.EndpointPickerRef
	if ref == nil || ref.Kind != "" && ref.Kind != "Service" || ref.Port == nil {
		t.Fatalf("endpointPickerRef %+v: want a Service with a port", ref)
	}
	svc := s.services[ref.Name]
	if svc == nil {
		t.Fatalf("endpointPickerRef names Service %q, which does not exist", ref.Name)
	}
	i := slices.IndexFunc(svc.Spec.Ports, func(sp corev1.ServicePort) bool { return sp.Port == ref.Port.Number })
	if i < 0 || svc.Spec.Ports[i].TargetPort.StrVal != "grpc" || svc.Spec.Ports[i].AppProtocol == nil || *svc.Spec.Ports[i].AppProtocol != "kubernetes.io/h2c" {
		t.Errorf("Service %s has no h2c port %d targeting grpc: %+v", ref.Name, ref.Port.Number, svc.Spec.Ports)
	}
}

// The route hangs on the overlay's Gateway and sends /v1/ to the pool.
func checkRoute(t *testing.T, s *eppSystem) {
	r := s.routes["llm"]
	if r == nil || len(r.Spec.ParentRefs) != 1 || s.gateways[r.Spec.ParentRefs[0].Name] == nil {
		t.Fatalf("HTTPRoute llm must hang on a Gateway of the overlay: %+v (gateways %v)", r, sortedKeys(s.gateways))
	}
	if g := s.gateways[r.Spec.ParentRefs[0].Name]; g.Spec.GatewayClassName == "" || len(g.Spec.Listeners) == 0 {
		t.Errorf("Gateway %s: class %q, listeners %+v", g.Name, g.Spec.GatewayClassName, g.Spec.Listeners)
	}
	for _, rule := range r.Spec.Rules {
		for _, b := range rule.BackendRefs {
			if b.Group != "inference.networking.k8s.io" || b.Kind != "InferencePool" || s.pools[b.Name] == nil {
				t.Errorf("backendRef %+v is not the overlay's InferencePool", b)
			}
		}
		if len(rule.Matches) == 0 || rule.Matches[0].Path.Value != "/v1/" {
			t.Errorf("rule matches %+v, want PathPrefix /v1/", rule.Matches)
		}
	}
}

// The EPP runs `llm-ring epp` with flags it has, on the grpc port its
// Service and probes use; its configuration passes the router's parser and
// gossips with its own peers.
func checkEPP(t *testing.T, s *eppSystem) {
	d := s.deployments["epp"]
	if d == nil {
		t.Fatal("no Deployment epp")
	}
	c := d.Spec.Template.Spec.Containers[0]
	if len(c.Args) == 0 || c.Args[0] != "epp" {
		t.Fatalf("args %v: want the epp subcommand", c.Args)
	}
	checkSubcommandFlags(t, "epp", c.Args[1:])
	arg := func(name string) string {
		if i := slices.Index(c.Args, name); i >= 0 && i+1 < len(c.Args) {
			return c.Args[i+1]
		}
		return ""
	}
	grpc := namedPort(c, "grpc")
	if !strings.HasSuffix(arg("--grpc-listen"), ":"+strconv.Itoa(int(grpc))) {
		t.Errorf("--grpc-listen %q, container port grpc %d", arg("--grpc-listen"), grpc)
	}
	if s.pools[arg("--inference-pool")] == nil || arg("--pool-namespace") != namespace || s.services[arg("--epp-service")] == nil {
		t.Errorf("--inference-pool %q --pool-namespace %q --epp-service %q: want the overlay's pool and Service", arg("--inference-pool"), arg("--pool-namespace"), arg("--epp-service"))
	}
	for name, p := range map[string]*corev1.Probe{"liveness": c.LivenessProbe, "readiness": c.ReadinessProbe} {
		if p == nil || p.GRPC == nil || p.GRPC.Port != grpc || p.GRPC.Service == nil || *p.GRPC.Service != name {
			t.Errorf("%s probe %+v: want the gRPC health service %q on port %d", name, p, name, grpc)
		}
	}
	cm := s.configMaps["epp-config"]
	cfg, err := config.Parse([]byte(cm.Data["router.yaml"]))
	if err != nil {
		t.Fatalf("epp-config router.yaml: %v", err)
	}
	if !strings.HasSuffix(cfg.Listen, ":"+strconv.Itoa(int(namedPort(c, "http")))) {
		t.Errorf("listen %q, container port http %d", cfg.Listen, namedPort(c, "http"))
	}
	if k := cfg.Cluster.Peers.Kubernetes; k == nil || s.services[k.Service] == nil || s.services[k.Service].Spec.ClusterIP != corev1.ClusterIPNone {
		t.Errorf("cluster.peers %+v: want the headless epp-peers Service", cfg.Cluster.Peers)
	}
	router := s.configMaps[routerConfig]
	rcfg, err := config.Parse([]byte(router.Data["router.yaml"]))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Policy != rcfg.Policy {
		t.Errorf("the EPP routes with %q, the proxy with %q: they would decide differently", cfg.Policy, rcfg.Policy)
	}
}

// The EPP may read its pool, the pods and its peers' EndpointSlices, and
// nothing else.
func checkEPPRBAC(t *testing.T, s *eppSystem) {
	r := s.roles["epp-pool-reader"]
	if r == nil {
		t.Fatal("no Role epp-pool-reader")
	}
	want := map[string]string{"inference.networking.k8s.io/inferencepools": "", "/pods": "", "discovery.k8s.io/endpointslices": ""}
	for _, rule := range r.Rules {
		for _, g := range rule.APIGroups {
			for _, res := range rule.Resources {
				k := g + "/" + res
				if _, ok := want[k]; !ok || !slices.Equal(rule.Verbs, []string{"get", "list", "watch"}) {
					t.Errorf("rule %s verbs %v: want get, list, watch on %v only", k, rule.Verbs, sortedKeys(want))
				}
				delete(want, k)
			}
		}
	}
	if len(want) > 0 {
		t.Errorf("Role epp-pool-reader lacks %v", sortedKeys(want))
	}
	if sa := s.deployments["epp"].Spec.Template.Spec.ServiceAccountName; sa != "epp" {
		t.Errorf("the EPP runs as %q, want epp", sa)
	}
}
