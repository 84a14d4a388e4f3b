package discovery

// Model labels against a real kube-apiserver (envtest, as
// inferencepool_envtest_test.go): the pod informer with its transform, a
// pod's label and annotation, a Service's label on its slice.

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/llm-ring/llm-ring/internal/replicaset"
)

func TestKubernetesModelLabelsEnvtest(t *testing.T) {
	cfg := apiServer(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	kube := kubernetes.NewForConfigOrDie(cfg)
	ns := "model-labels"
	if _, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pods := kube.CoreV1().Pods(ns)
	for _, p := range []*corev1.Pod{
		podWith("llm-0", map[string]string{modelLabel: "llama-8b"}, nil),
		podWith("llm-1", nil, map[string]string{modelLabel + "s": "meta-llama/Llama-3.1-8B,qwen-7b"}),
	} {
		p.Namespace = ns
		p.Spec = corev1.PodSpec{Containers: []corev1.Container{{Name: "vllm", Image: "vllm"}}}
		if _, err := pods.Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	es := slice("llm-a", "llm", ep("llm-0", "10.0.0.0"), ep("llm-1", "10.0.0.1"))
	es.Namespace = ns
	for i := range es.Endpoints {
		es.Endpoints[i].TargetRef.Namespace = ns
	}
	slicesAPI := kube.DiscoveryV1().EndpointSlices(ns)
	created, err := slicesAPI.Create(ctx, es, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	src, err := NewKubernetes(KubernetesOptions{Namespace: ns, Service: "llm", PortName: "http", RESTConfig: cfg, ModelLabel: modelLabel})
	if err != nil {
		t.Fatal(err)
	}
	sets := make(chan []replicaset.Replica, 16)
	errc := make(chan error, 1)
	go func() { errc <- src.Run(ctx, func(rs []replicaset.Replica) { sets <- rs }) }()
	expect := func(what string, want []replicaset.Replica) {
		t.Helper()
		timeout := time.After(30 * time.Second)
		for {
			select {
			case got := <-sets:
				if equalWithModels(got, want) {
					return
				}
			case <-timeout:
				t.Fatalf("%s: never published %v", what, want)
			}
		}
	}
	r0, r1 := "http://10.0.0.0:8080", "http://10.0.0.1:8080"
	expect("from the pods", withModels(rs("llm-0", r0, "llm-1", r1),
		models("llama-8b", ""), models("meta-llama/Llama-3.1-8B", "", "qwen-7b", "")))

	p, err := pods.Get(ctx, "llm-0", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p.Labels[modelLabel] = "llama-70b"
	if _, err := pods.Update(ctx, p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	expect("pod relabelled", withModels(rs("llm-0", r0, "llm-1", r1),
		models("llama-70b", ""), models("meta-llama/Llama-3.1-8B", "", "qwen-7b", "")))

	created.Labels[modelLabel] = "mistral-7b"
	if _, err := slicesAPI.Update(ctx, created, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	expect("slice labelled", withModels(rs("llm-0", r0, "llm-1", r1), models("mistral-7b", ""), models("mistral-7b", "")))
	cancel()
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
}
