// Package deploy holds the tests of llm-ring's Kubernetes manifests
// (deploy/k8s and its overlays), of cluster/kind-config.yaml and of the
// Dockerfile: typed parsing and cross-references here, a real API server
// (envtest) in envtest_test.go.
package deploy

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer/json"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
)

// Kustomizations under test: what `kubectl apply -k` is given.
const (
	baseDir = "k8s/base"
	simDir  = "k8s/overlays/sim"
	allDir  = "k8s" // every manifest file lives below
)

// strictDecoder decodes YAML into the client-go scheme's typed objects and
// rejects unknown or duplicate fields, as `kubectl apply --validate=strict`.
var strictDecoder = json.NewSerializerWithOptions(json.DefaultMetaFactory, scheme.Scheme, scheme.Scheme,
	json.SerializerOptions{Yaml: true, Strict: true})

// decodeStrict decodes one YAML document into its typed object.
func decodeStrict(doc []byte) (runtime.Object, error) {
	obj, _, err := strictDecoder.Decode(doc, nil, nil)
	return obj, err
}

// splitYAML splits a multi-document YAML stream, dropping empty documents.
func splitYAML(data []byte) ([][]byte, error) {
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	var docs [][]byte
	for {
		doc, err := r.Read()
		if err != nil {
			if errors.Is(err, io.EOF) {
				return docs, nil
			}
			return nil, err
		}
		if len(bytes.TrimSpace(stripComments(doc))) > 0 {
			docs = append(docs, doc)
		}
	}
}

func stripComments(doc []byte) []byte {
	var out [][]byte
	for _, l := range bytes.Split(doc, []byte("\n")) {
		if t := bytes.TrimSpace(l); len(t) > 0 && t[0] != '#' {
			out = append(out, l)
		}
	}
	return bytes.Join(out, []byte("\n"))
}

// render runs kustomize on dir, as `kubectl apply -k dir` (or
// `kubectl kustomize dir`) does, and returns the objects in output order.
func render(t *testing.T, dir string) []*unstructured.Unstructured {
	t.Helper()
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	m, err := k.Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		t.Fatalf("kustomize %s: %v", dir, err)
	}
	var out []*unstructured.Unstructured
	for _, r := range m.Resources() {
		// Through JSON, so numbers are int64/float64 as in every unstructured
		// object client-go makes (kustomize's own maps hold plain ints).
		js, err := r.MarshalJSON()
		if err != nil {
			t.Fatalf("kustomize %s: %s: %v", dir, r.CurId(), err)
		}
		u := &unstructured.Unstructured{}
		if err := u.UnmarshalJSON(js); err != nil {
			t.Fatalf("kustomize %s: %s: %v", dir, r.CurId(), err)
		}
		out = append(out, u)
	}
	return out
}

// system is a rendered kustomization, decoded into typed objects by kind
// and name.
type system struct {
	objects      []*unstructured.Unstructured // as rendered, in order
	namespaces   map[string]*corev1.Namespace
	configMaps   map[string]*corev1.ConfigMap
	services     map[string]*corev1.Service
	statefulSets map[string]*appsv1.StatefulSet
	deployments  map[string]*appsv1.Deployment
	pdbs         map[string]*policyv1.PodDisruptionBudget
	accounts     map[string]*corev1.ServiceAccount
	roles        map[string]*rbacv1.Role
	bindings     map[string]*rbacv1.RoleBinding
	secrets      map[string]*corev1.Secret
	netpols      map[string]*networkingv1.NetworkPolicy
}

// workload is a Deployment or StatefulSet seen through its pod template.
type workload struct {
	kind, name string
	selector   map[string]string
	template   *corev1.PodTemplateSpec
}

func (s *system) workloads() []workload {
	var out []workload
	for _, n := range sortedKeys(s.statefulSets) {
		w := s.statefulSets[n]
		out = append(out, workload{"StatefulSet", n, w.Spec.Selector.MatchLabels, &w.Spec.Template})
	}
	for _, n := range sortedKeys(s.deployments) {
		w := s.deployments[n]
		out = append(out, workload{"Deployment", n, w.Spec.Selector.MatchLabels, &w.Spec.Template})
	}
	return out
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// load renders dir and decodes every object strictly into its typed form;
// an object of a kind the tests do not know is an error, so a new manifest
// cannot slip in untested.
func load(t *testing.T, dir string) *system {
	t.Helper()
	s := &system{
		namespaces:   map[string]*corev1.Namespace{},
		configMaps:   map[string]*corev1.ConfigMap{},
		services:     map[string]*corev1.Service{},
		statefulSets: map[string]*appsv1.StatefulSet{},
		deployments:  map[string]*appsv1.Deployment{},
		pdbs:         map[string]*policyv1.PodDisruptionBudget{},
		accounts:     map[string]*corev1.ServiceAccount{},
		roles:        map[string]*rbacv1.Role{},
		bindings:     map[string]*rbacv1.RoleBinding{},
		secrets:      map[string]*corev1.Secret{},
		netpols:      map[string]*networkingv1.NetworkPolicy{},
	}
	s.objects = render(t, dir)
	for _, u := range s.objects {
		doc, err := u.MarshalJSON()
		if err != nil {
			t.Fatal(err)
		}
		obj, err := decodeStrict(doc)
		if err != nil {
			t.Fatalf("%s: %s %s: %v", dir, u.GetKind(), u.GetName(), err)
		}
		name := u.GetName()
		switch o := obj.(type) {
		case *corev1.Namespace:
			s.namespaces[name] = o
		case *corev1.ConfigMap:
			s.configMaps[name] = o
		case *corev1.Service:
			s.services[name] = o
		case *appsv1.StatefulSet:
			s.statefulSets[name] = o
		case *appsv1.Deployment:
			s.deployments[name] = o
		case *policyv1.PodDisruptionBudget:
			s.pdbs[name] = o
		case *corev1.ServiceAccount:
			s.accounts[name] = o
		case *rbacv1.Role:
			s.roles[name] = o
		case *rbacv1.RoleBinding:
			s.bindings[name] = o
		case *corev1.Secret:
			s.secrets[name] = o
		case *networkingv1.NetworkPolicy:
			s.netpols[name] = o
		default:
			t.Fatalf("%s: %s %s: kind not covered by the manifest tests", dir, u.GetKind(), name)
		}
	}
	return s
}

// manifestFiles lists the YAML files under deploy/k8s, sorted.
func manifestFiles(t *testing.T) []string {
	t.Helper()
	var files []string
	err := filepath.WalkDir(allDir, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && (strings.HasSuffix(path, ".yaml") || strings.HasSuffix(path, ".yml")) {
			files = append(files, path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(files)
	if len(files) == 0 {
		t.Fatalf("no manifests under %s", allDir)
	}
	return files
}
