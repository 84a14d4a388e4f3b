package discovery

import (
	"github.com/llm-ring/llm-ring/internal/replicaset"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

type podOpt func(*corev1.Pod)

func podLabels(kv ...string) podOpt {
	return func(p *corev1.Pod) {
		p.Labels = map[string]string{}
		for i := 0; i < len(kv); i += 2 {
			p.Labels[kv[i]] = kv[i+1]
		}
	}
}
func podNotReady(p *corev1.Pod)         { p.Status.Conditions[0].Status = corev1.ConditionFalse }
func podPending(p *corev1.Pod)          { p.Status.Phase = corev1.PodPending }
func podDeleting(p *corev1.Pod)         { p.DeletionTimestamp = &metav1.Time{} }
func podNoIP(p *corev1.Pod)             { p.Status.PodIP = "" }
func podNoReadyCondition(p *corev1.Pod) { p.Status.Conditions = nil }

func pod(name, ip string, opts ...podOpt) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "llm", Labels: map[string]string{"app": "vllm"}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ip,
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}},
	}
	for _, o := range opts {
		o(p)
	}
	return p
}

func poolObj(spec map[string]any) map[string]any {
	return map[string]any{"apiVersion": "inference.networking.k8s.io/v1", "kind": "InferencePool",
		"metadata": map[string]any{"name": "pool", "namespace": "llm"}, "spec": spec}
}

func TestParseInferencePool(t *testing.T) {
	p, err := ParseInferencePool(poolObj(map[string]any{
		"selector":    map[string]any{"matchLabels": map[string]any{"app": "vllm"}},
		"targetPorts": []any{map[string]any{"number": int64(8000)}, map[string]any{"number": int64(8001)}},
		"endpointPickerRef": map[string]any{"name": "llm-ring-epp", "port": map[string]any{"number": int64(9002)},
			"failureMode": "FailOpen"},
	}))
	if err != nil {
		t.Fatal(err)
	}
	want := EndpointPickerRef{Kind: "Service", Name: "llm-ring-epp", Port: 9002, FailureMode: "FailOpen"}
	if p.Selector["app"] != "vllm" || !slices.Equal(p.TargetPorts, []int32{8000, 8001}) || p.EndpointPickerRef == nil || *p.EndpointPickerRef != want {
		t.Fatalf("parsed %+v (ref %+v)", p, p.EndpointPickerRef)
	}
	for _, tc := range []struct {
		spec map[string]any
		want string
	}{
		// Each row: the field the error must name.
		{map[string]any{"targetPorts": []any{map[string]any{"number": int64(8000)}}}, "spec.selector.matchLabels"},
		{map[string]any{"selector": map[string]any{"matchLabels": map[string]any{"a": "b"}}}, "spec.targetPorts"},
		{map[string]any{"selector": map[string]any{"matchLabels": map[string]any{"a": "b"}},
			"targetPorts": []any{map[string]any{"number": int64(0)}}}, "spec.targetPorts[0].number"},
	} {
		if _, err := ParseInferencePool(poolObj(tc.spec)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: err %v, want one naming %s", tc.spec, err, tc.want)
		}
	}
}

func TestPoolReplicas(t *testing.T) {
	one := InferencePool{Selector: map[string]string{"app": "vllm"}, TargetPorts: []int32{8000}}
	two := InferencePool{Selector: map[string]string{"app": "vllm"}, TargetPorts: []int32{8000, 8001}}
	tests := []struct {
		name string
		pool InferencePool
		pods []*corev1.Pod
		want []replicaset.Replica
	}{
		// Ready pods that the selector matches, sorted by name.
		{"ready pods", one, []*corev1.Pod{pod("b", "10.0.0.2"), pod("a", "10.0.0.1")},
			rs("a", "http://10.0.0.1:8000", "b", "http://10.0.0.2:8000")},
		// Another app's pod, a pod loading its model, one not yet running,
		// one being deleted and one without an IP are not endpoints.
		{"not selected or not ready", one, []*corev1.Pod{pod("a", "10.0.0.1"), pod("x", "10.0.0.9", podLabels("app", "other")),
			pod("n", "10.0.0.3", podNotReady), pod("p", "10.0.0.4", podPending), pod("d", "10.0.0.5", podDeleting),
			pod("i", "", podNoIP), pod("c", "10.0.0.6", podNoReadyCondition)},
			rs("a", "http://10.0.0.1:8000")},
		// Each target port is its own endpoint, named pod:port.
		{"two ports", two, []*corev1.Pod{pod("a", "10.0.0.1")},
			rs("a:8000", "http://10.0.0.1:8000", "a:8001", "http://10.0.0.1:8001")},
		// IPv6 pod IPs are bracketed.
		{"IPv6", one, []*corev1.Pod{pod("a", "fd00::1")}, rs("a", "http://[fd00::1]:8000")},
		// Nothing selected is an empty, non-nil set.
		{"empty", one, nil, rs()},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := PoolReplicas(tc.pool, tc.pods); !slices.EqualFunc(got, tc.want, replicaset.Equal) || got == nil {
				t.Fatalf("got %v, want %v", got, tc.want)
			}
		})
	}
}

func TestNewInferencePoolErrors(t *testing.T) {
	if _, err := NewInferencePool(InferencePoolOptions{Namespace: "llm"}); err == nil || !strings.Contains(err.Error(), "pool") {
		t.Fatalf("no pool name: %v", err)
	}
}
