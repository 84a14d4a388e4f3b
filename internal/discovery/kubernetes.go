package discovery

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"github.com/llm-ring/llm-ring/internal/replicaset"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"strings"

	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	discoveryinformers "k8s.io/client-go/informers/discovery/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
)

// KubernetesOptions configures a Kubernetes source. Namespace, Service and
// PortName are required. At most one of Client, RESTConfig and Kubeconfig is
// set; when none is, the in-cluster configuration (the pod's ServiceAccount)
// is used.
type KubernetesOptions struct {
	// Namespace holds the Service and its EndpointSlices.
	Namespace string
	// Service selects the EndpointSlices labelled
	// kubernetes.io/service-name=<Service>.
	Service string
	// PortName is the EndpointSlice port (the Service port's name) whose
	// number forms each replica's URL.
	PortName string

	// Client is a ready clientset (tests pass k8s.io/client-go/kubernetes/fake).
	Client kubernetes.Interface
	// RESTConfig builds the clientset (envtest, or a caller-made config).
	RESTConfig *rest.Config
	// Kubeconfig is a kubeconfig path, for running outside the cluster.
	Kubeconfig string

	// ModelLabel, when set (discovery.model_source labels), names each
	// replica's models: the EndpointSlice's label ModelLabel for every
	// endpoint in it, else its pod's label ModelLabel and annotation
	// ModelLabel+"s" (a comma-separated list); a replica with neither has
	// unknown (nil) models. The pods are watched too (kubernetes_models.go).
	ModelLabel string

	// Logger receives debug lines for every recomputed set and warnings for
	// watch errors. nil discards them.
	Logger *slog.Logger
}

// Kubernetes discovers replicas from the EndpointSlices of one Service,
// through a client-go informer: a list, then a watch, never polling.
//
// A replica is an endpoint whose conditions.ready is true (nil counts as true,
// as the EndpointSlice API defines) and whose conditions.terminating is not
// true. It is named after its targetRef (the pod name; falling back to the
// hostname, then the address), so a StatefulSet replica keeps its name, hence
// its ring positions, when it turns not ready and ready again. Its URL is
// http://<first address>:<port named PortName>. Endpoints are merged across
// all slices of the Service and de-duplicated by name.
type Kubernetes struct {
	namespace, service, portName string
	modelLabel                   string
	client                       kubernetes.Interface
	log                          *slog.Logger
}

var _ Source = (*Kubernetes)(nil)

// NewKubernetes checks opts and builds the API client. It does not contact
// the API server: connection and permission errors appear when Run starts
// watching (as warnings, retried with back-off, as client-go does).
func NewKubernetes(opts KubernetesOptions) (*Kubernetes, error) {
	var missing []string
	if opts.Namespace == "" {
		missing = append(missing, "namespace")
	}
	if opts.Service == "" {
		missing = append(missing, "service")
	}
	if opts.PortName == "" {
		missing = append(missing, "port name")
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("kubernetes discovery: %s must not be empty", strings.Join(missing, ", "))
	}
	set := 0
	for _, b := range []bool{opts.Client != nil, opts.RESTConfig != nil, opts.Kubeconfig != ""} {
		if b {
			set++
		}
	}
	if set > 1 {
		return nil, errors.New("kubernetes discovery: set at most one of Client, RESTConfig and Kubeconfig")
	}

	client := opts.Client
	if client == nil {
		cfg := opts.RESTConfig
		switch {
		case cfg != nil:
			cfg = rest.CopyConfig(cfg)
		case opts.Kubeconfig != "":
			c, err := clientcmd.BuildConfigFromFlags("", opts.Kubeconfig)
			if err != nil {
				return nil, fmt.Errorf("kubernetes discovery: kubeconfig %s: %w", opts.Kubeconfig, err)
			}
			cfg = c
		default:
			c, err := rest.InClusterConfig()
			if err != nil {
				return nil, fmt.Errorf("kubernetes discovery: in-cluster configuration (set discovery.kubernetes.kubeconfig to run outside a cluster): %w", err)
			}
			cfg = c
		}
		cfg = rest.AddUserAgent(cfg, "llm-ring")
		c, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			return nil, fmt.Errorf("kubernetes discovery: %w", err)
		}
		client = c
	}

	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Kubernetes{
		namespace:  opts.Namespace,
		service:    opts.Service,
		portName:   opts.PortName,
		modelLabel: opts.ModelLabel,
		client:     client,
		log:        log.With("source", "kubernetes", "namespace", opts.Namespace, "service", opts.Service),
	}, nil
}

// Run watches the Service's EndpointSlices. Once the informer's cache has
// synced it publishes the ready set (possibly empty), then publishes again
// after every change of that set; events that leave the set unchanged (a
// slice of another Service, a new not-ready endpoint, a label edit) publish
// nothing. With a ModelLabel it watches the namespace's pods too, and a
// change of a replica's models is a change of the set. All publications
// come from Run's own goroutine. Run returns nil when ctx is done.
func (k *Kubernetes) Run(ctx context.Context, update func([]replicaset.Replica)) error {
	selector := labels.Set{discoveryv1.LabelServiceName: k.service}.String()
	informer := discoveryinformers.NewFilteredEndpointSliceInformer(k.client, k.namespace, 0, cache.Indexers{},
		func(o *metav1.ListOptions) { o.LabelSelector = selector })
	if err := informer.SetWatchErrorHandlerWithContext(func(_ context.Context, _ *cache.Reflector, err error) {
		k.log.Warn("endpointslice_watch_error", "err", err)
	}); err != nil {
		return fmt.Errorf("kubernetes discovery: %w", err)
	}

	informers := []cache.SharedIndexInformer{informer}
	var pods cache.SharedIndexInformer
	if k.modelLabel != "" {
		var err error
		if pods, err = k.podInformer(); err != nil {
			return err
		}
		informers = append(informers, pods)
	}
	changed, synced, err := signalChanges(informers)
	if err != nil {
		return err
	}

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan struct{}, len(informers))
	for _, inf := range informers {
		go func() {
			defer func() { done <- struct{}{} }()
			inf.RunWithContext(ctx)
		}()
	}
	defer func() {
		for range informers {
			<-done
		}
	}()

	if !cache.WaitForCacheSync(ctx.Done(), synced...) {
		return nil // ctx done before the first list succeeded
	}
	var last []replicaset.Replica
	published := false
	publish := func() {
		var cur []replicaset.Replica
		if pods == nil {
			cur = ReadyReplicas(storeSlices(informer.GetStore()), k.service, k.portName)
		} else {
			cur = LabeledReplicas(storeSlices(informer.GetStore()), k.service, k.portName, k.modelLabel, storePods(pods.GetStore()))
		}
		if published && slices.EqualFunc(cur, last, replicaset.Equal) {
			return
		}
		last, published = cur, true
		k.log.Debug("endpointslices_changed", "replicas", names(cur))
		update(slices.Clone(cur))
	}
	publish()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-changed:
			publish()
		}
	}
}

// signalChanges makes every event of the informers signal the returned
// channel. Event handlers only signal; the set is recomputed from the
// informers' stores in Run's goroutine, so a burst of events costs one
// recomputation and update is never called concurrently.
func signalChanges(infs []cache.SharedIndexInformer) (<-chan struct{}, []cache.InformerSynced, error) {
	changed := make(chan struct{}, 1)
	signal := func() {
		select {
		case changed <- struct{}{}:
		default:
		}
	}
	handler := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { signal() },
		UpdateFunc: func(any, any) { signal() },
		DeleteFunc: func(any) { signal() },
	}
	var synced []cache.InformerSynced
	for _, inf := range infs {
		reg, err := inf.AddEventHandlerWithOptions(handler, cache.HandlerOptions{})
		if err != nil {
			return nil, nil, fmt.Errorf("kubernetes discovery: %w", err)
		}
		synced = append(synced, inf.HasSynced, reg.HasSynced)
	}
	return changed, synced, nil
}

func storeSlices(s cache.Store) []*discoveryv1.EndpointSlice {
	items := s.List()
	out := make([]*discoveryv1.EndpointSlice, 0, len(items))
	for _, it := range items {
		if es, ok := it.(*discoveryv1.EndpointSlice); ok {
			out = append(out, es)
		}
	}
	return out
}

func names(rs []replicaset.Replica) []string {
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = r.Name
	}
	return out
}

// ReadyReplicas computes the replica set from a Service's EndpointSlices, in
// any order: the ready, non-terminating endpoints of the slices labelled
// kubernetes.io/service-name=service that carry a port named portName,
// de-duplicated by name and sorted by name. The result never depends on the
// order of slices or of their endpoints.
//
// When one name appears more than once (a pod listed in both an IPv4 and an
// IPv6 slice, or in two slices while the controller moves it), the IPv4
// address wins over IPv6 over FQDN, then the smallest URL; the result is
// never nil (an empty set is an empty, non-nil slice).
func ReadyReplicas(eps []*discoveryv1.EndpointSlice, service, portName string) []replicaset.Replica {
	return readyReplicas(eps, service, portName, nil)
}

// readyReplicas is ReadyReplicas with each endpoint's models given by
// models (nil: none, the models stay unknown).
func readyReplicas(eps []*discoveryv1.EndpointSlice, service, portName string,
	models func(*discoveryv1.EndpointSlice, discoveryv1.Endpoint) []replicaset.Model) []replicaset.Replica {
	type candidate struct {
		replicaset.Replica
		rank int // address-type preference
	}
	var cands []candidate
	for _, es := range eps {
		if es == nil || es.Labels[discoveryv1.LabelServiceName] != service {
			continue
		}
		port, ok := slicePort(es, portName)
		if !ok {
			continue
		}
		rank := addressRank(es.AddressType)
		for _, ep := range es.Endpoints {
			if !endpointReady(ep) || len(ep.Addresses) == 0 || ep.Addresses[0] == "" {
				continue
			}
			addr := ep.Addresses[0]
			r := replicaset.Replica{
				Name: endpointName(ep),
				URL:  "http://" + net.JoinHostPort(addr, strconv.Itoa(int(port))),
			}
			if models != nil {
				r.Models = models(es, ep)
			}
			cands = append(cands, candidate{Replica: r, rank: rank})
		}
	}
	slices.SortFunc(cands, func(a, b candidate) int {
		return cmp.Or(
			strings.Compare(a.Name, b.Name),
			cmp.Compare(a.rank, b.rank),
			strings.Compare(a.URL, b.URL),
		)
	})
	cands = slices.CompactFunc(cands, func(a, b candidate) bool { return a.Name == b.Name })
	out := make([]replicaset.Replica, len(cands))
	for i, c := range cands {
		out[i] = c.Replica
	}
	return out
}

// slicePort returns the number of the slice's port named name. A nil port
// number means "all ports" in the API, which gives no URL: such a slice is
// skipped like one without the port.
func slicePort(es *discoveryv1.EndpointSlice, name string) (int32, bool) {
	for _, p := range es.Ports {
		if p.Name != nil && *p.Name == name && p.Port != nil && *p.Port > 0 {
			return *p.Port, true
		}
	}
	return 0, false
}

func addressRank(t discoveryv1.AddressType) int {
	switch t {
	case discoveryv1.AddressTypeIPv4:
		return 0
	case discoveryv1.AddressTypeIPv6:
		return 1
	}
	return 2
}

// endpointReady: ready is true or unset (the API reads nil as true), and the
// endpoint is not terminating (with publishNotReadyAddresses a terminating
// endpoint can still say ready).
func endpointReady(ep discoveryv1.Endpoint) bool {
	c := ep.Conditions
	if c.Ready != nil && !*c.Ready {
		return false
	}
	return c.Terminating == nil || !*c.Terminating
}

// endpointName is the targetRef's name (the pod), else the hostname, else the
// first address.
func endpointName(ep discoveryv1.Endpoint) string {
	if ep.TargetRef != nil && ep.TargetRef.Name != "" {
		return ep.TargetRef.Name
	}
	if ep.Hostname != nil && *ep.Hostname != "" {
		return *ep.Hostname
	}
	return ep.Addresses[0]
}
