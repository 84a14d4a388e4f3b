package deploy

import (
	"path"
	"slices"
	"strconv"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/llm-ring/llm-ring/internal/config"
)

// gossipSecret is the Secret router-gossip-secret.template.yaml tells the
// operator to create.
const gossipSecret = "llm-ring-gossip"

// checkRouterCluster (issue 13): three router instances route as one. The
// Deployment runs three, rolls without ever dropping below three, spreads
// them over nodes, drains before stopping; each pod gossips on 7946 (TCP and
// UDP) at its own IP with the key from the Secret, as router.yaml says.
func checkRouterCluster(t *testing.T, s *system, cfg *config.Router, d *appsv1.Deployment) {
	t.Helper()
	cl := cfg.Cluster
	if cl.Mode != config.ClusterGossip {
		t.Fatalf("router.yaml: cluster.mode %q, want gossip (three instances)", cl.Mode)
	}
	if d.Spec.Replicas == nil || *d.Spec.Replicas != 3 {
		t.Errorf("router replicas %v, want 3", d.Spec.Replicas)
	}
	ru := d.Spec.Strategy.RollingUpdate
	if d.Spec.Strategy.Type != appsv1.RollingUpdateDeploymentStrategyType || ru == nil ||
		ru.MaxUnavailable == nil || ru.MaxUnavailable.IntValue() != 0 || ru.MaxSurge == nil || ru.MaxSurge.IntValue() != 1 {
		t.Errorf("router strategy %+v, want RollingUpdate maxUnavailable 0, maxSurge 1", d.Spec.Strategy)
	}
	pod := d.Spec.Template.Spec
	if !slices.ContainsFunc(pod.TopologySpreadConstraints, func(c corev1.TopologySpreadConstraint) bool {
		return c.TopologyKey == "kubernetes.io/hostname" && c.LabelSelector != nil &&
			c.LabelSelector.MatchLabels["app.kubernetes.io/name"] == routerName
	}) {
		t.Errorf("router pods must spread over kubernetes.io/hostname")
	}
	if pdb := s.pdbs[routerName]; pdb == nil || pdb.Spec.MaxUnavailable == nil || pdb.Spec.MaxUnavailable.IntValue() != 1 {
		t.Errorf("want a PodDisruptionBudget %s with maxUnavailable 1", routerName)
	}
	c := pod.Containers[0]
	checkRouterRuntime(t, c)
	// Gossip: both protocols on the port router.yaml binds, and in the peers
	// Service under the name router.yaml reads.
	_, bindPort, _ := strings.Cut(cl.Bind, ":")
	for _, proto := range []corev1.Protocol{corev1.ProtocolTCP, corev1.ProtocolUDP} {
		if !slices.ContainsFunc(c.Ports, func(p corev1.ContainerPort) bool {
			return strconv.Itoa(int(p.ContainerPort)) == bindPort && p.Protocol == proto
		}) {
			t.Errorf("router container has no %s port %s (cluster.bind %s)", proto, bindPort, cl.Bind)
		}
	}
	if k := cl.Peers.Kubernetes; cl.Peers.Mode != config.ClusterPeersKubernetes || k == nil {
		t.Errorf("router.yaml: cluster.peers.mode %q, want kubernetes", cl.Peers.Mode)
	} else if svc := s.services[k.Service]; svc == nil || !slices.ContainsFunc(svc.Spec.Ports, func(p corev1.ServicePort) bool {
		return p.Name == k.PortName && strconv.Itoa(int(p.Port)) == bindPort && p.Protocol == corev1.ProtocolTCP
	}) {
		t.Errorf("router.yaml: cluster.peers.kubernetes %s/%s is not a TCP port %s of a Service", k.Service, k.PortName, bindPort)
	}
	// advertise ${POD_IP}: the pod's IP from the Downward API.
	if strings.Contains(cl.Advertise, "${POD_IP}") && !slices.ContainsFunc(c.Env, func(e corev1.EnvVar) bool {
		return e.Name == "POD_IP" && e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "status.podIP"
	}) {
		t.Errorf("cluster.advertise %q needs env POD_IP from status.podIP", cl.Advertise)
	}
	// The key: the Secret mounted read-only where secret_file points.
	dir, file := path.Split(cl.SecretFile)
	mounted := false
	for _, m := range c.VolumeMounts {
		for _, v := range pod.Volumes {
			if v.Name == m.Name && v.Secret != nil && v.Secret.SecretName == gossipSecret && m.ReadOnly && path.Clean(m.MountPath) == path.Clean(dir) {
				mounted = file == "key"
			}
		}
	}
	if !mounted {
		t.Errorf("cluster.secret_file %s is not the key \"key\" of Secret %s mounted read-only", cl.SecretFile, gossipSecret)
	}
	// Drain: shutdown_delay (readiness fails, the listener keeps serving
	// while the endpoint is removed) and the grace period are checked with
	// the admin settings in manifests_test.go.
}

// checkRouterRuntime (issue 21): the router's container sets GOGC above
// Go's 100 and GOMEMLIMIT, as Go writes it, between 80 % and 100 % of
// its memory limit (a higher GOGC without a soft limit could grow the
// heap past the pod's limit).
func checkRouterRuntime(t *testing.T, c corev1.Container) {
	t.Helper()
	env := map[string]string{}
	for _, e := range c.Env {
		env[e.Name] = e.Value
	}
	if g, err := strconv.Atoi(env["GOGC"]); err != nil || g <= 100 {
		t.Errorf("router env GOGC %q: want an integer above Go's 100", env["GOGC"])
	}
	soft, err := goMemLimit(env["GOMEMLIMIT"])
	limit := c.Resources.Limits.Memory().Value()
	if err != nil || limit == 0 || soft < limit*8/10 || soft >= limit {
		t.Errorf("router env GOMEMLIMIT %q (%d bytes, %v) against limits.memory %d: want 80–100 %% of it", env["GOMEMLIMIT"], soft, err, limit)
	}
}

// goMemLimit parses GOMEMLIMIT as the Go runtime does: an integer with an
// optional B, KiB, MiB, GiB or TiB suffix.
func goMemLimit(s string) (int64, error) {
	mult := int64(1)
	for i, suf := range []string{"TiB", "GiB", "MiB", "KiB", "B"} {
		if n, ok := strings.CutSuffix(s, suf); ok {
			s, mult = n, int64(1)<<(10*(4-i))
			break
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	return n * mult, err
}
