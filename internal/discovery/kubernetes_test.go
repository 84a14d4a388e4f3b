package discovery

import (
	"context"
	"errors"
	"github.com/llm-ring/llm-ring/internal/replicaset"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/rest"
	k8stesting "k8s.io/client-go/testing"
)

// Fixtures: a slice of Service svc with port "http" = 8080, and endpoints
// named after their pod.

type epOpt func(*discoveryv1.Endpoint)

func notReady(e *discoveryv1.Endpoint)    { e.Conditions.Ready = ptr(false) }
func readyUnset(e *discoveryv1.Endpoint)  { e.Conditions.Ready = nil }
func terminating(e *discoveryv1.Endpoint) { e.Conditions.Terminating = ptr(true) }
func noTargetRef(e *discoveryv1.Endpoint) { e.TargetRef = nil }
func hostname(h string) epOpt             { return func(e *discoveryv1.Endpoint) { e.Hostname = &h } }

func ptr[T any](v T) *T { return &v }

func ep(pod, addr string, opts ...epOpt) discoveryv1.Endpoint {
	e := discoveryv1.Endpoint{
		Addresses:  []string{addr},
		Conditions: discoveryv1.EndpointConditions{Ready: ptr(true)},
		TargetRef:  &corev1.ObjectReference{Kind: "Pod", Namespace: "llm-ring", Name: pod},
	}
	for _, o := range opts {
		o(&e)
	}
	return e
}

func slice(name, service string, eps ...discoveryv1.Endpoint) *discoveryv1.EndpointSlice {
	return &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			Name:      name,
			Namespace: "llm-ring",
			Labels:    map[string]string{discoveryv1.LabelServiceName: service},
		},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr("http"), Port: ptr[int32](8080)}},
		Endpoints:   eps,
	}
}

func withAddressType(t discoveryv1.AddressType, s *discoveryv1.EndpointSlice) *discoveryv1.EndpointSlice {
	s.AddressType = t
	return s
}

func withPorts(ports []discoveryv1.EndpointPort, s *discoveryv1.EndpointSlice) *discoveryv1.EndpointSlice {
	s.Ports = ports
	return s
}

func rs(pairs ...string) []replicaset.Replica {
	out := []replicaset.Replica{}
	for i := 0; i < len(pairs); i += 2 {
		out = append(out, replicaset.Replica{Name: pairs[i], URL: pairs[i+1]})
	}
	return out
}

func TestReadyReplicas(t *testing.T) {
	tests := []struct {
		name   string
		slices []*discoveryv1.EndpointSlice
		want   []replicaset.Replica
	}{{
		// The plain case: ready endpoints become replicas, sorted by name.
		name: "one slice",
		slices: []*discoveryv1.EndpointSlice{slice("llm-a", "llm",
			ep("llm-2", "10.0.0.2"), ep("llm-0", "10.0.0.0"), ep("llm-1", "10.0.0.1"))},
		want: rs("llm-0", "http://10.0.0.0:8080", "llm-1", "http://10.0.0.1:8080", "llm-2", "http://10.0.0.2:8080"),
	}, {
		// A replica still loading its model is not ready: it stays out of the ring.
		name:   "not ready left out",
		slices: []*discoveryv1.EndpointSlice{slice("llm-a", "llm", ep("llm-0", "10.0.0.0"), ep("llm-1", "10.0.0.1", notReady))},
		want:   rs("llm-0", "http://10.0.0.0:8080"),
	}, {
		// The API defines an unset ready condition as ready.
		name:   "ready unset counts as ready",
		slices: []*discoveryv1.EndpointSlice{slice("llm-a", "llm", ep("llm-0", "10.0.0.0", readyUnset))},
		want:   rs("llm-0", "http://10.0.0.0:8080"),
	}, {
		// A terminating pod leaves, even when it still says ready
		// (publishNotReadyAddresses).
		name: "terminating left out",
		slices: []*discoveryv1.EndpointSlice{slice("llm-a", "llm",
			ep("llm-0", "10.0.0.0", terminating), ep("llm-1", "10.0.0.1", terminating, notReady), ep("llm-2", "10.0.0.2"))},
		want: rs("llm-2", "http://10.0.0.2:8080"),
	}, {
		// A Service with more endpoints than fit one slice has several: merged.
		name: "several slices merged",
		slices: []*discoveryv1.EndpointSlice{
			slice("llm-b", "llm", ep("llm-3", "10.0.0.3"), ep("llm-1", "10.0.0.1")),
			slice("llm-a", "llm", ep("llm-0", "10.0.0.0"), ep("llm-2", "10.0.0.2")),
		},
		want: rs("llm-0", "http://10.0.0.0:8080", "llm-1", "http://10.0.0.1:8080",
			"llm-2", "http://10.0.0.2:8080", "llm-3", "http://10.0.0.3:8080"),
	}, {
		// A pod briefly listed in two slices is one replica.
		name: "duplicate across slices",
		slices: []*discoveryv1.EndpointSlice{
			slice("llm-a", "llm", ep("llm-0", "10.0.0.0")),
			slice("llm-b", "llm", ep("llm-0", "10.0.0.0"), ep("llm-1", "10.0.0.1")),
		},
		want: rs("llm-0", "http://10.0.0.0:8080", "llm-1", "http://10.0.0.1:8080"),
	}, {
		// Dual stack: the same pod in an IPv6 and an IPv4 slice; IPv4 wins,
		// whatever the order of the slices.
		name: "dual stack prefers IPv4",
		slices: []*discoveryv1.EndpointSlice{
			withAddressType(discoveryv1.AddressTypeIPv6, slice("llm-v6", "llm", ep("llm-0", "fd00::1"))),
			slice("llm-v4", "llm", ep("llm-0", "10.0.0.0")),
		},
		want: rs("llm-0", "http://10.0.0.0:8080"),
	}, {
		// IPv6 addresses are bracketed in the URL.
		name:   "IPv6 only",
		slices: []*discoveryv1.EndpointSlice{withAddressType(discoveryv1.AddressTypeIPv6, slice("llm-v6", "llm", ep("llm-0", "fd00::1")))},
		want:   rs("llm-0", "http://[fd00::1]:8080"),
	}, {
		// Another Service's slice in the same namespace is ignored.
		name: "other service ignored",
		slices: []*discoveryv1.EndpointSlice{
			slice("llm-a", "llm", ep("llm-0", "10.0.0.0")),
			slice("router-a", "router", ep("router-x", "10.0.1.0")),
		},
		want: rs("llm-0", "http://10.0.0.0:8080"),
	}, {
		// Without the named port there is no URL: the slice is skipped.
		name: "port chosen by name",
		slices: []*discoveryv1.EndpointSlice{
			withPorts([]discoveryv1.EndpointPort{{Name: ptr("metrics"), Port: ptr[int32](9090)}, {Name: ptr("http"), Port: ptr[int32](8081)}},
				slice("llm-a", "llm", ep("llm-0", "10.0.0.0"))),
			withPorts([]discoveryv1.EndpointPort{{Name: ptr("metrics"), Port: ptr[int32](9090)}},
				slice("llm-b", "llm", ep("llm-1", "10.0.0.1"))),
			withPorts([]discoveryv1.EndpointPort{{Name: ptr("http")}}, // nil port: "all ports"
				slice("llm-c", "llm", ep("llm-2", "10.0.0.2"))),
		},
		want: rs("llm-0", "http://10.0.0.0:8081"),
	}, {
		// Without a targetRef, the hostname names the replica, then the address.
		name: "name fallbacks",
		slices: []*discoveryv1.EndpointSlice{slice("llm-a", "llm",
			ep("", "10.0.0.7", noTargetRef, hostname("llm-7")), ep("", "10.0.0.8", noTargetRef))},
		want: rs("10.0.0.8", "http://10.0.0.8:8080", "llm-7", "http://10.0.0.7:8080"),
	}, {
		// An endpoint without an address cannot be reached; nil slices are tolerated.
		name:   "no address",
		slices: []*discoveryv1.EndpointSlice{nil, slice("llm-a", "llm", discoveryv1.Endpoint{TargetRef: &corev1.ObjectReference{Name: "llm-0"}})},
		want:   rs(),
	}, {
		// Nothing at all: an empty, non-nil set.
		name: "empty",
		want: rs(),
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := ReadyReplicas(tt.slices, "llm", "http")
			if got == nil || !slices.EqualFunc(got, tt.want, replicaset.Equal) {
				t.Fatalf("got %v, want %v", got, tt.want)
			}
			// The informer's store has no order: neither may the result.
			rev := slices.Clone(tt.slices)
			slices.Reverse(rev)
			for _, s := range rev {
				if s != nil {
					slices.Reverse(s.Endpoints)
				}
			}
			if got := ReadyReplicas(rev, "llm", "http"); !slices.EqualFunc(got, tt.want, replicaset.Equal) {
				t.Fatalf("reversed input: got %v, want %v", got, tt.want)
			}
		})
	}
}

func TestNewKubernetesErrors(t *testing.T) {
	valid := KubernetesOptions{Namespace: "llm-ring", Service: "llm", PortName: "http", Client: fake.NewClientset()}
	tests := []struct {
		name string
		edit func(*KubernetesOptions)
		want string
	}{
		// Each required field is named when missing.
		{"no namespace", func(o *KubernetesOptions) { o.Namespace = "" }, "namespace must not be empty"},
		{"no service or port", func(o *KubernetesOptions) { o.Service, o.PortName = "", "" }, "service, port name must not be empty"},
		// Two ways to reach the API server at once is ambiguous.
		{"client and kubeconfig", func(o *KubernetesOptions) { o.Kubeconfig = "/x" }, "at most one of"},
		{"client and rest config", func(o *KubernetesOptions) { o.RESTConfig = &rest.Config{} }, "at most one of"},
		// A kubeconfig that does not exist is named.
		{"missing kubeconfig", func(o *KubernetesOptions) { o.Client, o.Kubeconfig = nil, "/nonexistent/kubeconfig" }, "kubeconfig /nonexistent/kubeconfig"},
		// Outside a pod, in-cluster configuration fails with a hint.
		{"not in cluster", func(o *KubernetesOptions) { o.Client = nil }, "in-cluster configuration"},
	}
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	t.Setenv("KUBERNETES_SERVICE_PORT", "")
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := valid
			tt.edit(&o)
			_, err := NewKubernetes(o)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want it to contain %q", err, tt.want)
			}
		})
	}
	if _, err := NewKubernetes(valid); err != nil {
		t.Fatalf("valid options: %v", err)
	}
}

// watcher runs a Kubernetes source on a fake clientset and collects what it
// publishes.
type watcher struct {
	t       *testing.T
	client  *fake.Clientset
	updates chan []replicaset.Replica
	stop    func()
}

func startWatcher(t *testing.T, objects ...*discoveryv1.EndpointSlice) *watcher {
	t.Helper()
	client := fake.NewClientset()
	for _, o := range objects {
		if err := client.Tracker().Add(o); err != nil {
			t.Fatal(err)
		}
	}
	k, err := NewKubernetes(KubernetesOptions{Namespace: "llm-ring", Service: "llm", PortName: "http", Client: client})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	w := &watcher{t: t, client: client, updates: make(chan []replicaset.Replica, 100)}
	errc := make(chan error, 1)
	go func() { errc <- k.Run(ctx, func(r []replicaset.Replica) { w.updates <- r }) }()
	w.stop = func() {
		cancel()
		select {
		case err := <-errc:
			if err != nil {
				t.Errorf("Run: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Error("Run did not return after cancel")
		}
	}
	t.Cleanup(w.stop)
	return w
}

// next returns the next published set. The deadline only turns a hang into
// a failure; it asserts nothing about speed.
func (w *watcher) next() []replicaset.Replica {
	w.t.Helper()
	select {
	case r := <-w.updates:
		return r
	case <-time.After(30 * time.Second):
		w.t.Fatal("no replica set published")
		return nil
	}
}

func (w *watcher) expect(step string, want []replicaset.Replica) {
	w.t.Helper()
	if got := w.next(); !slices.EqualFunc(got, want, replicaset.Equal) {
		w.t.Fatalf("%s: published %v, want %v", step, got, want)
	}
}

func (w *watcher) apply(s *discoveryv1.EndpointSlice) {
	w.t.Helper()
	api := w.client.DiscoveryV1().EndpointSlices(s.Namespace)
	_, err := api.Update(context.Background(), s, metav1.UpdateOptions{})
	if err != nil {
		_, err = api.Create(context.Background(), s, metav1.CreateOptions{})
	}
	if err != nil {
		w.t.Fatal(err)
	}
}

func (w *watcher) delete(name string) {
	w.t.Helper()
	if err := w.client.DiscoveryV1().EndpointSlices("llm-ring").Delete(context.Background(), name, metav1.DeleteOptions{}); err != nil {
		w.t.Fatal(err)
	}
}

func TestKubernetesFollowsSlices(t *testing.T) {
	w := startWatcher(t)
	r0, r1, r2 := "http://10.0.0.0:8080", "http://10.0.0.1:8080", "http://10.0.0.2:8080"

	w.expect("synced, nothing yet", rs())

	w.apply(slice("llm-a", "llm", ep("llm-0", "10.0.0.0"), ep("llm-1", "10.0.0.1", notReady)))
	w.expect("slice added, llm-1 loading", rs("llm-0", r0))

	w.apply(slice("llm-a", "llm", ep("llm-0", "10.0.0.0"), ep("llm-1", "10.0.0.1")))
	w.expect("llm-1 ready", rs("llm-0", r0, "llm-1", r1))

	w.apply(slice("llm-b", "llm", ep("llm-2", "10.0.0.2")))
	w.expect("second slice", rs("llm-0", r0, "llm-1", r1, "llm-2", r2))

	w.apply(slice("llm-a", "llm", ep("llm-0", "10.0.0.0"), ep("llm-1", "10.0.0.1", notReady)))
	w.expect("llm-1 not ready", rs("llm-0", r0, "llm-2", r2))

	// Back with the same name and URL, hence the same ring positions.
	w.apply(slice("llm-a", "llm", ep("llm-0", "10.0.0.0"), ep("llm-1", "10.0.0.1")))
	w.expect("llm-1 ready again", rs("llm-0", r0, "llm-1", r1, "llm-2", r2))

	w.apply(slice("llm-b", "llm", ep("llm-2", "10.0.0.2", terminating)))
	w.expect("llm-2 terminating", rs("llm-0", r0, "llm-1", r1))

	w.delete("llm-a")
	w.expect("slice deleted", rs())
}

func TestKubernetesPublishesOnlyChanges(t *testing.T) {
	w := startWatcher(t, slice("llm-a", "llm", ep("llm-0", "10.0.0.0")))
	w.expect("initial list", rs("llm-0", "http://10.0.0.0:8080"))

	// None of these changes the ready set, so none may publish: the next
	// publication must be the real change that follows them.
	w.apply(slice("router-a", "router", ep("router-x", "10.0.9.9")))                              // another Service
	w.apply(slice("llm-b", "llm", ep("llm-1", "10.0.0.1", notReady)))                             // a loading replica
	w.apply(slice("llm-c", "llm", ep("llm-0", "10.0.0.0")))                                       // a duplicate
	w.apply(slice("llm-a", "llm", ep("llm-0", "10.0.0.0"), ep("llm-9", "10.0.0.9", terminating))) // a terminating one
	w.apply(withPorts(nil, slice("llm-d", "llm", ep("llm-5", "10.0.0.5"))))                       // no usable port
	w.apply(slice("llm-b", "llm", ep("llm-1", "10.0.0.1")))                                       // the real change
	w.expect("after no-op events", rs("llm-0", "http://10.0.0.0:8080", "llm-1", "http://10.0.0.1:8080"))

	select {
	case r := <-w.updates:
		t.Fatalf("unexpected extra publication %v", r)
	default:
	}
}

func TestKubernetesRunStopsOnCancel(t *testing.T) {
	// Run returns nil promptly once ctx is done, also before any sync: here the
	// fake API server refuses every list.
	client := fake.NewClientset()
	listed := make(chan struct{}, 1)
	client.PrependReactor("list", "endpointslices", func(k8stesting.Action) (bool, runtime.Object, error) {
		select {
		case listed <- struct{}{}:
		default:
		}
		return true, nil, errors.New("refused")
	})
	k, err := NewKubernetes(KubernetesOptions{Namespace: "llm-ring", Service: "llm", PortName: "http", Client: client})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	published := make(chan []replicaset.Replica, 1)
	go func() { errc <- k.Run(ctx, func(r []replicaset.Replica) { published <- r }) }()
	select {
	case <-listed:
	case <-time.After(30 * time.Second):
		t.Fatal("the informer never listed")
	}
	cancel()
	select {
	case err := <-errc:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return after cancel")
	}
	if len(published) != 0 {
		t.Fatalf("published %v without a successful list", <-published)
	}
}
