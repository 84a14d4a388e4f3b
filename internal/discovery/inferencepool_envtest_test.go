package discovery

// InferencePool discovery against a real kube-apiserver and etcd
// (sigs.k8s.io/controller-runtime/pkg/envtest), with the InferencePool CRD
// of deploy/k8s/overlays/epp/crds installed. The binaries come from
// hack/envtest-assets.sh ($KUBEBUILDER_ASSETS, or its cache); without them
// these tests skip, except with CI=true, where they fail.

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/yaml"

	"github.com/llm-ring/llm-ring/internal/kubetest"
	"github.com/llm-ring/llm-ring/internal/replicaset"
)

// One control plane for the package, with the InferencePool CRD installed.
var plane = kubetest.ControlPlane{CRDs: []string{"deploy/k8s/overlays/epp/crds"}}

func TestMain(m *testing.M) { plane.Main(m) }

func apiServer(t *testing.T) *rest.Config { return plane.Config(t) }

func inferencePool(ns, name string, ports ...int64) *unstructured.Unstructured {
	tps := make([]any, len(ports))
	for i, p := range ports {
		tps[i] = map[string]any{"number": p}
	}
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "inference.networking.k8s.io/v1", "kind": "InferencePool",
		"metadata": map[string]any{"name": name, "namespace": ns},
		"spec": map[string]any{
			"selector":          map[string]any{"matchLabels": map[string]any{"app": "vllm"}},
			"targetPorts":       tps,
			"endpointPickerRef": map[string]any{"name": "llm-ring-epp", "port": map[string]any{"number": int64(9002)}},
		},
	}}
}

// TestInferencePoolEnvtest: the API server accepts a valid pool (with the
// schema's defaults) and rejects invalid ones; the source follows pods
// turning ready, the pool's ports changing, and the pool's removal.
func TestInferencePoolEnvtest(t *testing.T) {
	cfg := apiServer(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	kube := kubernetes.NewForConfigOrDie(cfg)
	dyn := dynamic.NewForConfigOrDie(cfg)
	ns := "pool-test"
	if _, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pools := dyn.Resource(InferencePoolGVR).Namespace(ns)
	// The schema: unique ports, a port for a Service picker, a selector.
	bad := inferencePool(ns, "dup", 8000, 8000)
	if _, err := pools.Create(ctx, bad, metav1.CreateOptions{}); err == nil || !strings.Contains(err.Error(), "unique") {
		t.Fatalf("duplicate ports accepted: %v", err)
	}
	noPort := inferencePool(ns, "noport", 8000)
	delete(noPort.Object["spec"].(map[string]any)["endpointPickerRef"].(map[string]any), "port")
	if _, err := pools.Create(ctx, noPort, metav1.CreateOptions{}); err == nil || !strings.Contains(err.Error(), "port is required") {
		t.Fatalf("a Service picker without a port accepted: %v", err)
	}
	created, err := pools.Create(ctx, inferencePool(ns, "pool", 8000), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if fm, _, _ := unstructured.NestedString(created.Object, "spec", "endpointPickerRef", "failureMode"); fm != "FailClose" {
		t.Fatalf("failureMode default = %q, want FailClose", fm)
	}
	src, err := NewInferencePool(InferencePoolOptions{Namespace: ns, Pool: "pool", RESTConfig: cfg, EPPService: "llm-ring-epp"})
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
				if slices.EqualFunc(got, want, replicaset.Equal) {
					return
				}
			case <-timeout:
				t.Fatalf("%s: never published %v", what, want)
			}
		}
	}
	expect("no pods", rs())
	for i, name := range []string{"vllm-0", "vllm-1"} {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{"app": "vllm"}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "vllm", Image: "vllm"}}}}
		if p, err = kube.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		p.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: fmt.Sprintf("10.1.0.%d", i+1),
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}}
		if _, err := kube.CoreV1().Pods(ns).UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	expect("two ready pods", rs("vllm-0", "http://10.1.0.1:8000", "vllm-1", "http://10.1.0.2:8000"))
	created.Object["spec"].(map[string]any)["targetPorts"] = []any{map[string]any{"number": int64(8000)}, map[string]any{"number": int64(8001)}}
	if _, err := pools.Update(ctx, created, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	expect("two ports", rs("vllm-0:8000", "http://10.1.0.1:8000", "vllm-0:8001", "http://10.1.0.1:8001",
		"vllm-1:8000", "http://10.1.0.2:8000", "vllm-1:8001", "http://10.1.0.2:8001"))
	if err := pools.Delete(ctx, "pool", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	expect("pool deleted", rs())
	// The overlay's own pool is valid under the CRD.
	data, err := os.ReadFile("../../deploy/k8s/overlays/epp/inferencepool.yaml")
	if err != nil {
		t.Fatal(err)
	}
	overlay := &unstructured.Unstructured{}
	if err := yaml.Unmarshal(data, &overlay.Object); err != nil {
		t.Fatal(err)
	}
	overlay.SetNamespace(ns)
	if _, err := pools.Create(ctx, overlay, metav1.CreateOptions{}); err != nil {
		t.Fatalf("deploy/k8s/overlays/epp/inferencepool.yaml: %v", err)
	}
	cancel()
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
}
