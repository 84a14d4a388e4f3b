package deploy

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// The router instances find each other through the headless router-peers
// Service, and only router pods may reach the gossip port (issue #13).
func TestRouterGossip(t *testing.T) {
	const gossipPort = 7946
	for _, dir := range []string{baseDir, simDir} {
		t.Run(dir, func(t *testing.T) {
			s := load(t, dir)
			peers := s.services["router-peers"]
			if peers == nil {
				t.Fatal("Service router-peers missing")
			}
			if peers.Spec.ClusterIP != corev1.ClusterIPNone || !peers.Spec.PublishNotReadyAddresses {
				t.Errorf("router-peers must be headless and publish not-ready pods (a starting router joins before it is ready)")
			}
			var tcp, udp bool
			for _, p := range peers.Spec.Ports {
				tcp = tcp || (p.Name == "gossip" && p.Protocol == corev1.ProtocolTCP && p.Port == gossipPort)
				udp = udp || (p.Protocol == corev1.ProtocolUDP && p.Port == gossipPort)
			}
			if !tcp || !udp {
				t.Errorf("router-peers ports %+v: want gossip TCP and UDP %d", peers.Spec.Ports, gossipPort)
			}
			router := labels.Set(s.deployments[routerName].Spec.Template.Labels)
			if pdb := s.pdbs[routerName]; pdb == nil || pdb.Spec.MaxUnavailable == nil || pdb.Spec.MaxUnavailable.IntValue() != 1 {
				t.Errorf("PodDisruptionBudget router: want maxUnavailable 1")
			}
			admitted := false
			for _, np := range s.netpols {
				if !labels.SelectorFromSet(np.Spec.PodSelector.MatchLabels).Matches(router) {
					continue
				}
				for _, rule := range np.Spec.Ingress {
					gossip := slices.ContainsFunc(rule.Ports, func(p networkingv1.NetworkPolicyPort) bool { return p.Port != nil && p.Port.IntValue() == gossipPort })
					if !gossip {
						continue
					}
					if len(rule.From) == 0 {
						t.Errorf("NetworkPolicy %s admits the gossip port from anywhere", np.Name)
					}
					for _, f := range rule.From {
						if f.PodSelector == nil || f.NamespaceSelector != nil || f.IPBlock != nil ||
							!labels.SelectorFromSet(f.PodSelector.MatchLabels).Matches(router) {
							t.Errorf("NetworkPolicy %s admits the gossip port from a peer other than router pods: %+v", np.Name, f)
						}
					}
					admitted = true
				}
			}
			if !admitted {
				t.Error("no NetworkPolicy admits router pods to the gossip port")
			}
		})
	}
}

// The gossip key is never applied from git: the template stays out of the
// kustomization and carries no key.
func TestGossipSecretTemplate(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(baseDir, "router-gossip-secret.template.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	docs, err := splitYAML(data)
	if err != nil || len(docs) != 1 {
		t.Fatalf("template: %v", err)
	}
	obj, err := decodeStrict(docs[0])
	if err != nil {
		t.Fatal(err)
	}
	sec, ok := obj.(*corev1.Secret)
	if !ok || sec.Name != "llm-ring-gossip" || len(sec.Data["key"]) != 0 {
		t.Fatalf("template must be an empty Secret llm-ring-gossip, got %T %+v", obj, obj)
	}
	for _, dir := range []string{baseDir, simDir} {
		for _, o := range load(t, dir).objects {
			if o.GetKind() == "Secret" {
				t.Errorf("%s renders Secret %s: keys must not come from git", dir, o.GetName())
			}
		}
	}
}

// secretTemplate returns the Secret called name from the base's
// *-secret.template.yaml files (created by hand, never applied from git),
// or nil.
func secretTemplate(t *testing.T, name string) *corev1.Secret {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(baseDir, "*-secret.template.yaml"))
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		docs, err := splitYAML(data)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range docs {
			if obj, err := decodeStrict(d); err == nil {
				if sec, ok := obj.(*corev1.Secret); ok && sec.Name == name {
					return sec
				}
			}
		}
	}
	return nil
}
