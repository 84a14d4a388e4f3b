// Package layout holds the test that keeps llm-ring's core pure: the
// packages that both drivers share (and the simulator itself) never import
// networking, Kubernetes, metrics or plotting libraries, so that the live
// router and the simulator run the very same decisions and nothing in the
// core can reach the outside world. (Kubernetes guards its staging
// repositories with import restrictions the same way.)
package layout

import (
	"os/exec"
	"strings"
	"testing"
)

// core lists the pure packages: routing decisions, routing state, the
// replica model, traffic, the simulator and the shapes they share.
var core = []string{
	"ring", "policy", "state", "prefix", "replicaset", "model", "traffic", "sim", "wire", "strict", "admission", "pool", "stats",
}

// forbidden are packages the core must not depend on, even indirectly: a
// path ending in "/" forbids everything under it, "net" only the package
// itself (net/url and net/netip are pure parsing), any other path the
// package and its subpackages.
var forbidden = []string{
	"net", "net/http", "os/exec",
	"k8s.io/", "sigs.k8s.io/controller-runtime",
	"gonum.org/v1/plot", "github.com/prometheus/client_golang",
	"github.com/hashicorp/memberlist",
}

func TestCoreImportsNothingOutside(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go command to list imports")
	}
	for _, pkg := range core {
		path := "github.com/llm-ring/llm-ring/internal/" + pkg
		out, err := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}}", path).CombinedOutput()
		if err != nil {
			t.Fatalf("go list %s: %v\n%s", path, err, out)
		}
		for _, dep := range strings.Fields(string(out)) {
			for _, bad := range forbidden {
				if dep == bad || strings.HasSuffix(bad, "/") && strings.HasPrefix(dep, bad) ||
					bad != "net" && !strings.HasSuffix(bad, "/") && strings.HasPrefix(dep, bad+"/") {
					t.Errorf("core package %s depends on %s (forbidden: %s)", pkg, dep, bad)
				}
			}
		}
	}
}
