package discovery

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/llm-ring/llm-ring/internal/engine"
	"github.com/llm-ring/llm-ring/internal/replicaset"
)

// LabeledReplicas is ReadyReplicas with each replica's models read from
// Kubernetes metadata (discovery.model_source labels; issue 23):
//
//   - the EndpointSlice's label `label` names the one model of every
//     endpoint in the slice (a Service's labels are copied onto its slices
//     by the EndpointSlice controller);
//   - else the endpoint's pod (its targetRef, looked up in pods): its label
//     `label` names one model and its annotation `label+"s"` lists several,
//     comma-separated (a label value cannot hold a comma, nor a '/', so
//     "meta-llama/Llama-3.1-8B" can only be named by the annotation); both
//     are read and joined;
//   - else the models are unknown (nil): the replica serves anything.
//
// Models named this way are base models; a LoRA adapter's base is known
// from the models section of the configuration (models.pools.*.adapters)
// or from polling. The result never depends on the order of slices or
// pods.
func LabeledReplicas(eps []*discoveryv1.EndpointSlice, service, portName, label string, pods []*corev1.Pod) []replicaset.Replica {
	byKey := make(map[string]*corev1.Pod, len(pods))
	for _, p := range pods {
		if p != nil {
			byKey[p.Namespace+"/"+p.Name] = p
		}
	}
	return readyReplicas(eps, service, portName, func(es *discoveryv1.EndpointSlice, ep discoveryv1.Endpoint) []replicaset.Model {
		if v := strings.TrimSpace(es.Labels[label]); v != "" {
			return []replicaset.Model{{Name: v}}
		}
		ref := ep.TargetRef
		if ref == nil || ref.Name == "" || (ref.Kind != "" && ref.Kind != "Pod") {
			return nil
		}
		ns := ref.Namespace
		if ns == "" {
			ns = es.Namespace
		}
		if p := byKey[ns+"/"+ref.Name]; p != nil {
			return metaModels(p.Labels[label], p.Annotations[label+"s"])
		}
		return nil
	})
}

// metaModels joins a label's model and an annotation's list; nil when
// both name none.
func metaModels(label, annotation string) []replicaset.Model {
	var out []replicaset.Model
	for _, name := range append([]string{label}, strings.Split(annotation, ",")...) {
		if name = strings.TrimSpace(name); name != "" {
			out = append(out, replicaset.Model{Name: name})
		}
	}
	return engine.NormalizeModels(out)
}

// podInformer watches the namespace's pods, keeping of each only what
// LabeledReplicas reads (name, namespace, labels, annotations), so that a
// namespace of many pods costs little memory.
func (k *Kubernetes) podInformer() (cache.SharedIndexInformer, error) {
	inf := coreinformers.NewPodInformer(k.client, k.namespace, 0, cache.Indexers{})
	err := inf.SetTransform(func(obj any) (any, error) {
		p, ok := obj.(*corev1.Pod)
		if !ok {
			return obj, nil // a tombstone: passed on as it is
		}
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{
			Name: p.Name, Namespace: p.Namespace, Labels: p.Labels, Annotations: p.Annotations,
			ResourceVersion: p.ResourceVersion,
		}}, nil
	})
	if err != nil {
		return nil, fmt.Errorf("kubernetes discovery: %w", err)
	}
	return inf, nil
}

func storePods(s cache.Store) []*corev1.Pod {
	items := s.List()
	out := make([]*corev1.Pod, 0, len(items))
	for _, it := range items {
		if p, ok := it.(*corev1.Pod); ok {
			out = append(out, p)
		}
	}
	return out
}
