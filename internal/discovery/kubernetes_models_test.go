package discovery

import (
	"context"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/llm-ring/llm-ring/internal/replicaset"
)

const modelLabel = "llm-ring.io/model"

func podWith(name string, labels, annotations map[string]string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "llm-ring", Labels: labels, Annotations: annotations}}
}

func labeled(s *discoveryv1.EndpointSlice, model string) *discoveryv1.EndpointSlice {
	s.Labels[modelLabel] = model
	return s
}

// withModels is rs with the replicas' models, one list per replica (nil:
// unknown).
func withModels(rs []replicaset.Replica, ms ...[]replicaset.Model) []replicaset.Replica {
	for i := range rs {
		rs[i].Models = ms[i]
	}
	return rs
}

func equalWithModels(a, b []replicaset.Replica) bool {
	return slices.EqualFunc(a, b, func(x, y replicaset.Replica) bool {
		return replicaset.Equal(x, y) && (x.Models == nil) == (y.Models == nil)
	})
}

func TestLabeledReplicas(t *testing.T) {
	r0, r1 := "http://10.0.0.0:8080", "http://10.0.0.1:8080"
	tests := []struct {
		name   string
		slices []*discoveryv1.EndpointSlice
		pods   []*corev1.Pod
		want   []replicaset.Replica
	}{{
		// The slice's label names the model of every endpoint in it, over
		// what the pods say.
		name:   "slice label",
		slices: []*discoveryv1.EndpointSlice{labeled(slice("llm-a", "llm", ep("llm-0", "10.0.0.0"), ep("llm-1", "10.0.0.1")), "qwen-7b")},
		pods:   []*corev1.Pod{podWith("llm-0", map[string]string{modelLabel: "other"}, nil)},
		want:   withModels(rs("llm-0", r0, "llm-1", r1), models("qwen-7b", ""), models("qwen-7b", "")),
	}, {
		// Without it, each pod's label; a pod with none is unknown (serves
		// anything), and so is an endpoint whose pod is not (yet) known.
		name:   "pod labels",
		slices: []*discoveryv1.EndpointSlice{slice("llm-a", "llm", ep("llm-0", "10.0.0.0"), ep("llm-1", "10.0.0.1"), ep("llm-2", "10.0.0.2"))},
		pods:   []*corev1.Pod{podWith("llm-1", map[string]string{"app": "vllm"}, nil), podWith("llm-0", map[string]string{modelLabel: "llama-8b"}, nil)},
		want:   withModels(rs("llm-0", r0, "llm-1", r1, "llm-2", "http://10.0.0.2:8080"), models("llama-8b", ""), nil, nil),
	}, {
		// The annotation lists several (label values hold no comma, no '/'),
		// joined with the label's, sorted, each once.
		name:   "pod annotation",
		slices: []*discoveryv1.EndpointSlice{slice("llm-a", "llm", ep("llm-0", "10.0.0.0"), ep("llm-1", "10.0.0.1"))},
		pods: []*corev1.Pod{
			podWith("llm-0", nil, map[string]string{modelLabel + "s": "meta-llama/Llama-3.1-8B, qwen-7b,,"}),
			podWith("llm-1", map[string]string{modelLabel: "qwen-7b"}, map[string]string{modelLabel + "s": "qwen-7b,mistral-7b"}),
		},
		want: withModels(rs("llm-0", r0, "llm-1", r1),
			models("meta-llama/Llama-3.1-8B", "", "qwen-7b", ""), models("mistral-7b", "", "qwen-7b", "")),
	}, {
		// A pod of the same name in another namespace is not this endpoint's,
		// and a targetRef that is not a pod names no pod.
		name: "only the referenced pod",
		slices: []*discoveryv1.EndpointSlice{slice("llm-a", "llm", ep("llm-0", "10.0.0.0"),
			func() discoveryv1.Endpoint {
				e := ep("llm-1", "10.0.0.1")
				e.TargetRef.Kind = "Node"
				return e
			}())},
		pods: []*corev1.Pod{
			{ObjectMeta: metav1.ObjectMeta{Name: "llm-0", Namespace: "elsewhere", Labels: map[string]string{modelLabel: "x"}}},
			podWith("llm-1", map[string]string{modelLabel: "y"}, nil),
		},
		want: withModels(rs("llm-0", r0, "llm-1", r1), nil, nil),
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := LabeledReplicas(tt.slices, "llm", "http", modelLabel, tt.pods)
			if !equalWithModels(got, tt.want) {
				t.Fatalf("got %v\nwant %v", got, tt.want)
			}
			rev, pods := slices.Clone(tt.slices), slices.Clone(tt.pods)
			slices.Reverse(rev)
			slices.Reverse(pods)
			if got := LabeledReplicas(rev, "llm", "http", modelLabel, pods); !equalWithModels(got, tt.want) {
				t.Fatalf("reversed input: got %v", got)
			}
			// Without a model label, the same slices give unknown models.
			for _, r := range ReadyReplicas(tt.slices, "llm", "http") {
				if r.Models != nil {
					t.Fatalf("ReadyReplicas gave %s models %v", r.Name, r.Models)
				}
			}
		})
	}
}

// The source watches the pods too: a label edit on a pod is a change of
// the set; an edit that changes no model publishes nothing.
func TestKubernetesFollowsPodLabels(t *testing.T) {
	client := fake.NewClientset()
	if err := client.Tracker().Add(slice("llm-a", "llm", ep("llm-0", "10.0.0.0"), ep("llm-1", "10.0.0.1"))); err != nil {
		t.Fatal(err)
	}
	pods := client.CoreV1().Pods("llm-ring")
	for _, p := range []*corev1.Pod{podWith("llm-0", map[string]string{modelLabel: "llama-8b"}, nil), podWith("llm-1", nil, nil)} {
		if _, err := pods.Create(context.Background(), p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	k, err := NewKubernetes(KubernetesOptions{Namespace: "llm-ring", Service: "llm", PortName: "http", Client: client, ModelLabel: modelLabel})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	w := &watcher{t: t, client: client, updates: make(chan []replicaset.Replica, 100)}
	errc := make(chan error, 1)
	go func() { errc <- k.Run(ctx, func(r []replicaset.Replica) { w.updates <- r }) }()
	defer func() {
		cancel()
		if err := <-errc; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	r0, r1 := "http://10.0.0.0:8080", "http://10.0.0.1:8080"
	expect := func(step string, want []replicaset.Replica) {
		t.Helper()
		if got := w.next(); !equalWithModels(got, want) {
			t.Fatalf("%s: published %v, want %v", step, got, want)
		}
	}
	expect("synced", withModels(rs("llm-0", r0, "llm-1", r1), models("llama-8b", ""), nil))

	update := func(p *corev1.Pod) {
		t.Helper()
		if _, err := pods.Update(context.Background(), p, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	update(podWith("llm-1", map[string]string{"app": "vllm"}, nil)) // no model named: nothing to publish
	update(podWith("llm-1", nil, map[string]string{modelLabel + "s": "qwen-7b,llama-8b"}))
	expect("llm-1 annotated", withModels(rs("llm-0", r0, "llm-1", r1), models("llama-8b", ""), models("llama-8b", "", "qwen-7b", "")))

	w.apply(labeled(slice("llm-a", "llm", ep("llm-0", "10.0.0.0"), ep("llm-1", "10.0.0.1")), "mistral-7b"))
	expect("slice labelled", withModels(rs("llm-0", r0, "llm-1", r1), models("mistral-7b", ""), models("mistral-7b", "")))
	select {
	case r := <-w.updates:
		t.Fatalf("unexpected extra publication %v", r)
	default:
	}
}
