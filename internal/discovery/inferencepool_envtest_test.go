package discovery

// InferencePool discovery against a real kube-apiserver and etcd
// (sigs.k8s.io/controller-runtime/pkg/envtest), with the InferencePool CRD
// of deploy/k8s/overlays/epp/crds installed. The binaries come from
// hack/envtest-assets.sh ($KUBEBUILDER_ASSETS, or its cache); without them
// these tests skip, except with CI=true, where they fail.

import (
	"bufio"
	"context"
	"fmt"
	"github.com/llm-ring/llm-ring/internal/replicaset"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/yaml"
)

var envState struct {
	once sync.Once
	env  *envtest.Environment
	cfg  *rest.Config
	skip string
	err  error
}

func TestMain(m *testing.M) {
	code := m.Run()
	if env := envState.env; env != nil {
		if err := env.Stop(); err != nil {
			fmt.Fprintf(os.Stderr, "stopping envtest: %v\n", err)
		}
	}
	os.Exit(code)
}

func apiServer(t *testing.T) *rest.Config {
	t.Helper()
	s := &envState
	s.once.Do(func() {
		dir, skip, err := envtestAssets()
		if err != nil || skip != "" {
			s.skip, s.err = skip, err
			return
		}
		s.env = &envtest.Environment{
			BinaryAssetsDirectory:    dir,
			CRDDirectoryPaths:        []string{filepath.Join("..", "..", "deploy", "k8s", "overlays", "epp", "crds")},
			ErrorIfCRDPathMissing:    true,
			ControlPlaneStartTimeout: 2 * time.Minute,
			ControlPlaneStopTimeout:  time.Minute,
		}
		if s.cfg, s.err = s.env.Start(); s.err != nil {
			s.env = nil
		}
	})
	switch {
	case s.skip != "" && os.Getenv("CI") == "true":
		t.Fatalf("CI=true and %s", s.skip)
	case s.skip != "":
		t.Skip(s.skip)
	case s.err != nil:
		t.Fatalf("envtest: %v", s.err)
	}
	return rest.CopyConfig(s.cfg)
}

// envtestAssets: $KUBEBUILDER_ASSETS, else the cache hack/envtest-assets.sh
// fills for the Kubernetes version hack/envtest/kube-apiserver pins.
func envtestAssets() (dir, skip string, err error) {
	has := func(d string) bool {
		for _, bin := range []string{"kube-apiserver", "etcd"} {
			if fi, err := os.Stat(filepath.Join(d, bin)); err != nil || fi.IsDir() || fi.Mode()&0o111 == 0 {
				return false
			}
		}
		return true
	}
	if d := os.Getenv("KUBEBUILDER_ASSETS"); d != "" {
		if !has(d) {
			return "", "", fmt.Errorf("KUBEBUILDER_ASSETS=%s holds no kube-apiserver and etcd binaries", d)
		}
		return d, "", nil
	}
	f, err := os.Open("../../hack/envtest/kube-apiserver/go.mod")
	if err != nil {
		return "", "", err
	}
	defer f.Close()
	version := ""
	for sc := bufio.NewScanner(f); sc.Scan(); {
		if fl := strings.Fields(sc.Text()); len(fl) >= 2 && fl[0] == "k8s.io/kubernetes" {
			version = strings.TrimPrefix(fl[1], "v")
		}
	}
	root := os.Getenv("LLM_RING_CACHE")
	if root == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return "", "", err
		}
		root = filepath.Join(home, ".cache", "llm-ring")
	}
	d := filepath.Join(root, "envtest", version)
	if version == "" || !has(d) {
		return "", fmt.Sprintf("no envtest binaries in %s: run `bash hack/envtest-assets.sh`", d), nil
	}
	return d, "", nil
}

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
