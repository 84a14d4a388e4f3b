package discovery

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/llm-ring/llm-ring/internal/replicaset"
)

// InferencePoolGVR is the Gateway API Inference Extension's InferencePool
// (inference.networking.k8s.io/v1).
var InferencePoolGVR = schema.GroupVersionResource{Group: "inference.networking.k8s.io", Version: "v1", Resource: "inferencepools"}

// InferencePool is the part of an InferencePool's spec llm-ring reads (the
// field names and meaning of inference.networking.k8s.io/v1, api/v1 in
// kubernetes-sigs/gateway-api-inference-extension).
type InferencePool struct {
	Selector          map[string]string  // spec.selector.matchLabels: the model server pods
	TargetPorts       []int32            // spec.targetPorts[].number: each pod port is one endpoint
	AppProtocol       string             // spec.appProtocol: http (default) or kubernetes.io/h2c
	EndpointPickerRef *EndpointPickerRef // spec.endpointPickerRef, nil when unset
}

// EndpointPickerRef names the pool's endpoint picker.
type EndpointPickerRef struct {
	Group, Kind, Name, FailureMode string
	Port                           int32
}

type poolSpec struct {
	Spec struct {
		Selector struct {
			MatchLabels map[string]string `json:"matchLabels"`
		} `json:"selector"`
		TargetPorts []struct {
			Number int32 `json:"number"`
		} `json:"targetPorts"`
		AppProtocol       string `json:"appProtocol"`
		EndpointPickerRef *struct {
			Group       *string `json:"group"`
			Kind        string  `json:"kind"`
			Name        string  `json:"name"`
			FailureMode string  `json:"failureMode"`
			Port        *struct {
				Number int32 `json:"number"`
			} `json:"port"`
		} `json:"endpointPickerRef"`
	} `json:"spec"`
}

// ParseInferencePool reads an InferencePool object. A pool with no
// selector or no target port selects nothing: that is an error naming the
// field (the API server's schema rejects both).
func ParseInferencePool(obj map[string]any) (InferencePool, error) {
	var s poolSpec
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj, &s); err != nil {
		return InferencePool{}, fmt.Errorf("inferencepool: %w", err)
	}
	p := InferencePool{Selector: s.Spec.Selector.MatchLabels, AppProtocol: s.Spec.AppProtocol}
	if len(p.Selector) == 0 {
		return p, errors.New("inferencepool: spec.selector.matchLabels is empty")
	}
	for i, tp := range s.Spec.TargetPorts {
		if tp.Number < 1 || tp.Number > 65535 {
			return p, fmt.Errorf("inferencepool: spec.targetPorts[%d].number must be 1..65535, got %d", i, tp.Number)
		}
		p.TargetPorts = append(p.TargetPorts, tp.Number)
	}
	if len(p.TargetPorts) == 0 {
		return p, errors.New("inferencepool: spec.targetPorts is empty")
	}
	if r := s.Spec.EndpointPickerRef; r != nil {
		ref := &EndpointPickerRef{Kind: r.Kind, Name: r.Name, FailureMode: r.FailureMode}
		if r.Group != nil {
			ref.Group = *r.Group
		}
		if ref.Kind == "" {
			ref.Kind = "Service"
		}
		if r.Port != nil {
			ref.Port = r.Port.Number
		}
		p.EndpointPickerRef = ref
	}
	return p, nil
}

// PoolReplicas computes a pool's replica set from pods, in any order: every
// ready, running, non-terminating pod that the selector matches, with an
// IP, once per target port. A pool of one target port names each replica
// after its pod; with several, "<pod>:<port>" (each port is its own
// endpoint, as the API defines). URLs are http://<pod IP>:<port>. The
// result is sorted by name and never nil.
func PoolReplicas(p InferencePool, pods []*corev1.Pod) []replicaset.Replica {
	sel := labels.SelectorFromSet(p.Selector)
	out := []replicaset.Replica{}
	for _, pod := range pods {
		if pod == nil || !sel.Matches(labels.Set(pod.Labels)) || !podReady(pod) {
			continue
		}
		for _, port := range p.TargetPorts {
			name := pod.Name
			if len(p.TargetPorts) > 1 {
				name += ":" + strconv.Itoa(int(port))
			}
			out = append(out, replicaset.Replica{Name: name, URL: "http://" + net.JoinHostPort(pod.Status.PodIP, strconv.Itoa(int(port)))})
		}
	}
	slices.SortFunc(out, func(a, b replicaset.Replica) int { return strings.Compare(a.Name, b.Name) })
	return slices.CompactFunc(out, func(a, b replicaset.Replica) bool { return a.Name == b.Name })
}

func podReady(p *corev1.Pod) bool {
	if p.DeletionTimestamp != nil || p.Status.Phase != corev1.PodRunning || p.Status.PodIP == "" {
		return false
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// InferencePoolOptions configure an InferencePool source. Namespace and
// Pool are required; RESTConfig or Kubeconfig as for KubernetesOptions
// (neither: in-cluster).
type InferencePoolOptions struct {
	Namespace, Pool string
	RESTConfig      *rest.Config
	Kubeconfig      string
	// EPPService, when set, is this endpoint picker's Service: a pool whose
	// endpointPickerRef names another is logged as a warning.
	EPPService string
	Logger     *slog.Logger
}

// InferencePoolSource discovers replicas from one InferencePool: the pool
// object (a dynamic informer on its name) and the pods of its namespace
// (an informer), recomputed on every change of either; no polling.
type InferencePoolSource struct {
	opts InferencePoolOptions
	dyn  dynamic.Interface
	kube kubernetes.Interface
	log  *slog.Logger
}

var _ Source = (*InferencePoolSource)(nil)

// NewInferencePool checks opts and builds the clients; it does not contact
// the API server.
func NewInferencePool(opts InferencePoolOptions) (*InferencePoolSource, error) {
	if opts.Namespace == "" || opts.Pool == "" {
		return nil, errors.New("inferencepool discovery: namespace and pool must not be empty")
	}
	if opts.RESTConfig != nil && opts.Kubeconfig != "" {
		return nil, errors.New("inferencepool discovery: set at most one of RESTConfig and Kubeconfig")
	}
	cfg := opts.RESTConfig
	var err error
	switch {
	case cfg != nil:
		cfg = rest.CopyConfig(cfg)
	case opts.Kubeconfig != "":
		if cfg, err = clientcmd.BuildConfigFromFlags("", opts.Kubeconfig); err != nil {
			return nil, fmt.Errorf("inferencepool discovery: kubeconfig %s: %w", opts.Kubeconfig, err)
		}
	default:
		if cfg, err = rest.InClusterConfig(); err != nil {
			return nil, fmt.Errorf("inferencepool discovery: in-cluster configuration (pass a kubeconfig to run outside a cluster): %w", err)
		}
	}
	cfg = rest.AddUserAgent(cfg, "llm-ring")
	s := &InferencePoolSource{opts: opts}
	if s.dyn, err = dynamic.NewForConfig(cfg); err != nil {
		return nil, fmt.Errorf("inferencepool discovery: %w", err)
	}
	if s.kube, err = kubernetes.NewForConfig(cfg); err != nil {
		return nil, fmt.Errorf("inferencepool discovery: %w", err)
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s.log = log.With("source", "inferencepool", "namespace", opts.Namespace, "pool", opts.Pool)
	return s, nil
}

// Run watches the pool and its namespace's pods and publishes the ready
// set once both caches have synced, then after every change of the set.
// A pool that is absent or invalid publishes an empty set (logged). Run
// returns nil when ctx is done.
func (s *InferencePoolSource) Run(ctx context.Context, update func([]replicaset.Replica)) error {
	ns := s.opts.Namespace
	poolInf := dynamicinformer.NewFilteredDynamicInformer(s.dyn, InferencePoolGVR, ns, 0, cache.Indexers{},
		func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("metadata.name", s.opts.Pool).String()
		}).Informer()
	podInf := coreinformers.NewPodInformer(s.kube, ns, 0, cache.Indexers{})
	changed := make(chan struct{}, 1)
	signal := func() {
		select {
		case changed <- struct{}{}:
		default:
		}
	}
	h := cache.ResourceEventHandlerFuncs{AddFunc: func(any) { signal() }, UpdateFunc: func(any, any) { signal() }, DeleteFunc: func(any) { signal() }}
	var synced []cache.InformerSynced
	for _, inf := range []cache.SharedIndexInformer{poolInf, podInf} {
		reg, err := inf.AddEventHandler(h)
		if err != nil {
			return fmt.Errorf("inferencepool discovery: %w", err)
		}
		synced = append(synced, inf.HasSynced, reg.HasSynced)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan struct{}, 2)
	go func() { poolInf.RunWithContext(ctx); done <- struct{}{} }()
	go func() { podInf.RunWithContext(ctx); done <- struct{}{} }()
	defer func() { <-done; <-done }()
	if !cache.WaitForCacheSync(ctx.Done(), synced...) {
		return nil
	}
	var last []replicaset.Replica
	published := false
	for {
		cur := s.compute(poolInf.GetStore(), podInf.GetStore())
		if !published || !slices.EqualFunc(cur, last, replicaset.Equal) {
			last, published = cur, true
			s.log.Debug("inferencepool_changed", "replicas", names(cur))
			update(slices.Clone(cur))
		}
		select {
		case <-ctx.Done():
			return nil
		case <-changed:
		}
	}
}

// compute reads the pool from its store and the pods from theirs.
func (s *InferencePoolSource) compute(pools, podStore cache.Store) []replicaset.Replica {
	var obj *unstructured.Unstructured
	for _, it := range pools.List() {
		if u, ok := it.(*unstructured.Unstructured); ok && u.GetName() == s.opts.Pool {
			obj = u
		}
	}
	if obj == nil {
		s.log.Warn("inferencepool_missing")
		return []replicaset.Replica{}
	}
	p, err := ParseInferencePool(obj.Object)
	if err != nil {
		s.log.Warn("inferencepool_invalid", "err", err)
		return []replicaset.Replica{}
	}
	if r := p.EndpointPickerRef; r != nil && s.opts.EPPService != "" && (r.Kind != "Service" || r.Name != s.opts.EPPService) {
		s.log.Warn("inferencepool_other_picker", "endpoint_picker", r.Kind+"/"+r.Name, "this", s.opts.EPPService)
	}
	var pods []*corev1.Pod
	for _, it := range podStore.List() {
		if pod, ok := it.(*corev1.Pod); ok {
			pods = append(pods, pod)
		}
	}
	return PoolReplicas(p, pods)
}
