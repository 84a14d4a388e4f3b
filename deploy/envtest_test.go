package deploy

// Integration tests against a real kube-apiserver and etcd
// (sigs.k8s.io/controller-runtime/pkg/envtest). The binaries are built from
// source by hack/envtest-assets.sh; without them these tests skip, except
// with CI=true, where they fail.

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/llm-ring/llm-ring/internal/discovery"
	"github.com/llm-ring/llm-ring/internal/kubetest"
	"github.com/llm-ring/llm-ring/internal/replicaset"
)

// One control plane for the whole package, started by the first test that
// needs it and stopped by TestMain.
var plane kubetest.ControlPlane

func TestMain(m *testing.M) { plane.Main(m) }

// controlPlane returns an admin configuration for the shared API server.
// Missing binaries skip the test, or fail it when CI=true.
func controlPlane(t *testing.T) *rest.Config { return plane.Config(t) }

// warnings collects the API server's warnings (deprecations, Pod Security
// violations in "warn" mode).
type warnings struct {
	mu   sync.Mutex
	list []string
}

func (w *warnings) HandleWarningHeader(_ int, _ string, text string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.list = append(w.list, text)
}

func (w *warnings) take() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := w.list
	w.list = nil
	return out
}

func newClient(t *testing.T, cfg *rest.Config) client.Client {
	t.Helper()
	c, err := client.New(cfg, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// applyObject server-side applies u, for real or as a dry run.
func applyObject(ctx context.Context, c client.Client, u *unstructured.Unstructured, dryRun bool) error {
	opts := []client.ApplyOption{client.FieldOwner("llm-ring-tests"), client.ForceOwnership}
	if dryRun {
		opts = append(opts, client.DryRunAll)
	}
	return c.Apply(ctx, client.ApplyConfigurationFromUnstructured(u.DeepCopy()), opts...)
}

// applyNamespace creates the rendered Namespace for real: namespaced objects
// cannot even be dry-run into a namespace that does not exist.
func applyNamespace(ctx context.Context, t *testing.T, c client.Client, objs []*unstructured.Unstructured) {
	t.Helper()
	for _, u := range objs {
		if u.GetKind() == "Namespace" {
			if err := applyObject(ctx, c, u, false); err != nil {
				t.Fatalf("namespace %s: %v", u.GetName(), err)
			}
		}
	}
}

// `kubectl apply -k --server-side --dry-run=server` of the base and of the
// sim overlay: every object passes the real API server's decoding,
// validation, defaulting and admission (including the namespace's
// "restricted" Pod Security level, whose warnings would appear here).
func TestServerSideDryRun(t *testing.T) {
	cfg := controlPlane(t)
	warn := &warnings{}
	cfg.WarningHandler = warn
	c := newClient(t, cfg)
	ctx := testContext(t)
	for _, dir := range []string{baseDir, simDir} {
		t.Run(dir, func(t *testing.T) {
			objs := render(t, dir)
			applyNamespace(ctx, t, c, objs)
			warn.take()
			for _, u := range objs {
				if err := applyObject(ctx, c, u, true); err != nil {
					t.Errorf("%s %s: rejected: %v", u.GetKind(), u.GetName(), err)
				}
				if w := warn.take(); len(w) > 0 {
					t.Errorf("%s %s: API server warnings: %q", u.GetKind(), u.GetName(), w)
				}
			}
		})
	}
}

// The dry run does reject what a real API server rejects: the test above can
// fail. (A StatefulSet whose selector does not match its pods is invalid;
// a privileged pod template breaks the namespace's Pod Security level.)
func TestServerSideDryRunRejects(t *testing.T) {
	cfg := controlPlane(t)
	warn := &warnings{}
	cfg.WarningHandler = warn
	c := newClient(t, cfg)
	ctx := testContext(t)
	objs := render(t, baseDir)
	applyNamespace(ctx, t, c, objs)
	var sts *unstructured.Unstructured
	for _, u := range objs {
		if u.GetKind() == "StatefulSet" {
			sts = u.DeepCopy()
		}
	}
	if sts == nil {
		t.Fatal("no StatefulSet rendered")
	}

	bad := sts.DeepCopy()
	if err := unstructured.SetNestedField(bad.Object, "other", "spec", "selector", "matchLabels", "app.kubernetes.io/name"); err != nil {
		t.Fatal(err)
	}
	if err := applyObject(ctx, c, bad, true); !apierrors.IsInvalid(err) {
		t.Errorf("selector not matching the pods: err = %v, want Invalid", err)
	}

	priv := sts.DeepCopy()
	containers, _, _ := unstructured.NestedSlice(priv.Object, "spec", "template", "spec", "containers")
	containers[0].(map[string]any)["securityContext"] = map[string]any{"privileged": true}
	if err := unstructured.SetNestedSlice(priv.Object, containers, "spec", "template", "spec", "containers"); err != nil {
		t.Fatal(err)
	}
	warn.take()
	if err := applyObject(ctx, c, priv, true); err != nil {
		t.Fatalf("privileged template: %v", err)
	}
	if w := warn.take(); !slices.ContainsFunc(w, func(s string) bool { return strings.Contains(s, "restricted") }) {
		t.Errorf("privileged pod template: warnings %q, want a Pod Security \"restricted\" violation", w)
	}
}

// Discovery against a real API server: slices appear, turn ready, turn not
// ready, terminate and disappear, and the published replica set follows.
func TestDiscoveryFollowsRealAPIServer(t *testing.T) {
	cfg := controlPlane(t)
	ctx := testContext(t)
	cs := kubernetes.NewForConfigOrDie(cfg)
	const ns = "discovery-test"
	_, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	w := watchReplicas(t, discovery.KubernetesOptions{Namespace: ns, Service: "llm", PortName: "http", RESTConfig: cfg})
	s := sliceWriterFor(cs, ns)
	r0, r1, r2 := "http://10.0.0.10:8080", "http://10.0.0.11:8080", "http://10.0.0.12:8080"

	w.expect("synced, nothing yet", nil)

	s.put(t, ctx, "llm-a", "llm", ep("llm-0", "10.0.0.10", true, false), ep("llm-1", "10.0.0.11", false, false))
	w.expect("slice created, llm-1 loading", []string{"llm-0", r0})

	s.put(t, ctx, "llm-a", "llm", ep("llm-0", "10.0.0.10", true, false), ep("llm-1", "10.0.0.11", true, false))
	w.expect("llm-1 ready", []string{"llm-0", r0, "llm-1", r1})

	s.put(t, ctx, "llm-b", "llm", ep("llm-2", "10.0.0.12", true, false))
	w.expect("second slice", []string{"llm-0", r0, "llm-1", r1, "llm-2", r2})

	// None of these changes the set: the next publication is the change after.
	s.put(t, ctx, "router-a", "router", ep("router-x", "10.0.0.99", true, false))
	s.put(t, ctx, "llm-c", "llm", ep("llm-0", "10.0.0.10", true, false))

	s.put(t, ctx, "llm-a", "llm", ep("llm-0", "10.0.0.10", true, false), ep("llm-1", "10.0.0.11", false, false))
	w.expect("llm-1 not ready", []string{"llm-0", r0, "llm-2", r2})

	// Same name and URL as before, hence the same ring positions.
	s.put(t, ctx, "llm-a", "llm", ep("llm-0", "10.0.0.10", true, false), ep("llm-1", "10.0.0.11", true, false))
	w.expect("llm-1 ready again", []string{"llm-0", r0, "llm-1", r1, "llm-2", r2})

	s.put(t, ctx, "llm-b", "llm", ep("llm-2", "10.0.0.12", true, true))
	w.expect("llm-2 terminating", []string{"llm-0", r0, "llm-1", r1})

	s.delete(t, ctx, "llm-c")
	s.delete(t, ctx, "llm-b")
	s.delete(t, ctx, "llm-a")
	w.expect("slices deleted", nil)
}

// The router's RBAC manifest, applied to a real API server, lets the
// router's ServiceAccount run discovery and nothing more.
func TestRouterRBAC(t *testing.T) {
	cfg := controlPlane(t)
	ctx := testContext(t)
	c := newClient(t, cfg)
	admin := kubernetes.NewForConfigOrDie(cfg)

	objs := render(t, baseDir)
	applyNamespace(ctx, t, c, objs)
	for _, u := range objs {
		switch u.GetKind() {
		case "ServiceAccount", "Role", "RoleBinding":
			if err := applyObject(ctx, c, u, false); err != nil {
				t.Fatalf("%s %s: %v", u.GetKind(), u.GetName(), err)
			}
		}
	}

	// The token the kubelet would mount into the router's pod.
	tr, err := admin.CoreV1().ServiceAccounts(namespace).CreateToken(ctx, routerName,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr(int64(600))}},
		metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("TokenRequest for ServiceAccount %s: %v", routerName, err)
	}
	sa := &rest.Config{
		Host:            cfg.Host,
		BearerToken:     tr.Status.Token,
		TLSClientConfig: rest.TLSClientConfig{CAData: cfg.CAData},
	}
	router := kubernetes.NewForConfigOrDie(sa)

	// Allowed: discovery, exactly as the router runs it.
	w := watchReplicas(t, discovery.KubernetesOptions{Namespace: namespace, Service: replicaSet, PortName: "http", RESTConfig: sa})
	w.expect("synced as the router", nil)
	writer := sliceWriterFor(admin, namespace)
	writer.put(t, ctx, "llm-rbac", replicaSet, ep("llm-0", "10.0.0.10", true, false))
	t.Cleanup(func() { writer.delete(t, context.Background(), "llm-rbac") })
	w.expect("slice seen as the router", []string{"llm-0", "http://10.0.0.10:8080"})

	// Forbidden: everything else.
	forbidden := []struct {
		what string
		call func() error
	}{
		{"list pods", func() error {
			_, err := router.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{})
			return err
		}},
		{"read a secret", func() error {
			_, err := router.CoreV1().Secrets(namespace).Get(ctx, "any", metav1.GetOptions{})
			return err
		}},
		{"list secrets", func() error {
			_, err := router.CoreV1().Secrets(namespace).List(ctx, metav1.ListOptions{})
			return err
		}},
		{"create an EndpointSlice", func() error {
			_, err := router.DiscoveryV1().EndpointSlices(namespace).Create(ctx,
				endpointSlice(namespace, "forged", replicaSet, ep("evil", "10.6.6.6", true, false)), metav1.CreateOptions{})
			return err
		}},
		{"delete an EndpointSlice", func() error {
			return router.DiscoveryV1().EndpointSlices(namespace).Delete(ctx, "llm-rbac", metav1.DeleteOptions{})
		}},
		{"list EndpointSlices of another namespace", func() error {
			_, err := router.DiscoveryV1().EndpointSlices("default").List(ctx, metav1.ListOptions{})
			return err
		}},
		{"list ConfigMaps", func() error {
			_, err := router.CoreV1().ConfigMaps(namespace).List(ctx, metav1.ListOptions{})
			return err
		}},
	}
	for _, f := range forbidden {
		if err := f.call(); !apierrors.IsForbidden(err) {
			t.Errorf("as the router, %s: err = %v, want Forbidden", f.what, err)
		}
	}
	// Positive control: the same client may list EndpointSlices here.
	if _, err := router.DiscoveryV1().EndpointSlices(namespace).List(ctx, metav1.ListOptions{}); err != nil {
		t.Errorf("as the router, list EndpointSlices: %v", err)
	}
}

func ptr[T any](v T) *T { return &v }

func ep(pod, addr string, ready, terminating bool) discoveryv1.Endpoint {
	return discoveryv1.Endpoint{
		Addresses:  []string{addr},
		Conditions: discoveryv1.EndpointConditions{Ready: ptr(ready), Serving: ptr(ready), Terminating: ptr(terminating)},
		TargetRef:  &corev1.ObjectReference{Kind: "Pod", Name: pod},
	}
}

func endpointSlice(ns, name, service string, eps ...discoveryv1.Endpoint) *discoveryv1.EndpointSlice {
	for i := range eps {
		eps[i].TargetRef.Namespace = ns
	}
	return &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			Name:      name,
			Namespace: ns,
			Labels: map[string]string{
				discoveryv1.LabelServiceName: service,
				discoveryv1.LabelManagedBy:   "llm-ring-tests",
			},
		},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr("http"), Port: ptr(int32(8080)), Protocol: ptr(corev1.ProtocolTCP)}},
		Endpoints:   eps,
	}
}

// sliceWriter writes EndpointSlices as the EndpointSlice controller would
// (envtest runs no controllers).
type sliceWriter struct {
	cs kubernetes.Interface
	ns string
}

func sliceWriterFor(cs kubernetes.Interface, ns string) sliceWriter { return sliceWriter{cs, ns} }

// put creates or replaces the slice.
func (s sliceWriter) put(t *testing.T, ctx context.Context, name, service string, eps ...discoveryv1.Endpoint) {
	t.Helper()
	api := s.cs.DiscoveryV1().EndpointSlices(s.ns)
	want := endpointSlice(s.ns, name, service, eps...)
	cur, err := api.Get(ctx, name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		_, err = api.Create(ctx, want, metav1.CreateOptions{})
	case err == nil:
		want.ResourceVersion = cur.ResourceVersion
		_, err = api.Update(ctx, want, metav1.UpdateOptions{})
	}
	if err != nil {
		t.Fatalf("EndpointSlice %s: %v", name, err)
	}
}

func (s sliceWriter) delete(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	if err := s.cs.DiscoveryV1().EndpointSlices(s.ns).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		t.Fatalf("EndpointSlice %s: %v", name, err)
	}
}

// replicaWatcher runs a Kubernetes discovery source and collects the sets
// it publishes.
type replicaWatcher struct {
	t       *testing.T
	updates chan []replicaset.Replica
}

func watchReplicas(t *testing.T, opts discovery.KubernetesOptions) *replicaWatcher {
	t.Helper()
	src, err := discovery.NewKubernetes(opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	w := &replicaWatcher{t: t, updates: make(chan []replicaset.Replica, 100)}
	errc := make(chan error, 1)
	go func() { errc <- src.Run(ctx, func(rs []replicaset.Replica) { w.updates <- rs }) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-errc:
			if err != nil {
				t.Errorf("discovery Run: %v", err)
			}
		case <-time.After(time.Minute):
			t.Error("discovery Run did not return after cancel")
		}
	})
	return w
}

// expect waits for the next publication and compares it with want, given
// as name, URL pairs. The deadline only turns a hang into a failure.
func (w *replicaWatcher) expect(step string, want []string) {
	w.t.Helper()
	var got []replicaset.Replica
	select {
	case got = <-w.updates:
	case <-time.After(time.Minute):
		w.t.Fatalf("%s: nothing published", step)
	}
	var flat []string
	for _, r := range got {
		flat = append(flat, r.Name, r.URL)
	}
	if !slices.Equal(flat, want) {
		w.t.Fatalf("%s: published %v, want %v", step, flat, want)
	}
}
