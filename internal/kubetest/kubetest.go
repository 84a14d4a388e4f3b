// Package kubetest starts one real kube-apiserver and etcd per test package
// (sigs.k8s.io/controller-runtime/pkg/envtest) for the integration tests of
// the Kubernetes sources and manifests. Only tests import it.
//
// The binaries are built from source by hack/envtest-assets.sh: they are
// $KUBEBUILDER_ASSETS when it is set (then they must be there), else the
// cache that script fills ($LLM_RING_CACHE or ~/.cache/llm-ring, then
// envtest/<version>, the version being the k8s.io/kubernetes requirement of
// hack/envtest/kube-apiserver/go.mod). Without them a test skips, except
// with CI=true, where it fails.
package kubetest

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// pinned is the nested module the API server is built from, relative to
// the repository's root.
const pinned = "hack/envtest/kube-apiserver/go.mod"

// ControlPlane is a test package's control plane, started by the first test
// that asks for it (a start costs seconds) and stopped by Stop (from
// TestMain). Its methods are safe for concurrent use.
type ControlPlane struct {
	// CRDs are directories of CustomResourceDefinitions to install, relative
	// to the repository's root; each must exist.
	CRDs []string

	once sync.Once
	env  *envtest.Environment
	cfg  *rest.Config
	skip string // why there is no control plane, when the binaries are absent
	err  error
}

// Config returns an admin configuration for the control plane, starting it
// if it is not running; it skips or fails t when it cannot (see the package
// comment).
func (c *ControlPlane) Config(t testing.TB) *rest.Config {
	t.Helper()
	c.once.Do(c.start)
	switch {
	case c.skip != "" && os.Getenv("CI") == "true":
		t.Fatalf("CI=true and %s", c.skip)
	case c.skip != "":
		t.Skip(c.skip)
	case c.err != nil:
		t.Fatalf("envtest: %v", c.err)
	}
	return rest.CopyConfig(c.cfg)
}

func (c *ControlPlane) start() {
	root, err := repoRoot()
	if err != nil {
		c.err = err
		return
	}
	dir, skip, err := assets(root)
	if err != nil || skip != "" {
		c.skip, c.err = skip, err
		return
	}
	env := &envtest.Environment{
		BinaryAssetsDirectory:    dir,
		ErrorIfCRDPathMissing:    true,
		ControlPlaneStartTimeout: 2 * time.Minute, // slow CI machines
		ControlPlaneStopTimeout:  time.Minute,
	}
	for _, d := range c.CRDs {
		env.CRDDirectoryPaths = append(env.CRDDirectoryPaths, filepath.Join(root, d))
	}
	if c.cfg, c.err = env.Start(); c.err == nil {
		c.env = env
	}
}

// Stop stops the control plane if a test started it.
func (c *ControlPlane) Stop() error {
	if c.env == nil {
		return nil
	}
	return c.env.Stop()
}

// Main runs a test package's tests and then stops c: a TestMain's body.
func (c *ControlPlane) Main(m *testing.M) {
	code := m.Run()
	if err := c.Stop(); err != nil {
		fmt.Fprintf(os.Stderr, "stopping envtest: %v\n", err)
	}
	os.Exit(code)
}

// repoRoot is the nearest directory above the working directory (a test's
// package directory) that holds the pinned module.
func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, pinned)); err == nil {
			return d, nil
		}
		if filepath.Dir(d) == d {
			return "", fmt.Errorf("no %s above %s", pinned, dir)
		}
	}
}

// assets finds kube-apiserver and etcd (see the package comment).
func assets(root string) (dir, skip string, err error) {
	if d := os.Getenv("KUBEBUILDER_ASSETS"); d != "" {
		if !hasBinaries(d) {
			return "", "", fmt.Errorf("KUBEBUILDER_ASSETS=%s holds no kube-apiserver and etcd binaries", d)
		}
		return d, "", nil
	}
	version, err := KubernetesVersion(filepath.Join(root, pinned))
	if err != nil {
		return "", "", err
	}
	cache := os.Getenv("LLM_RING_CACHE")
	if cache == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return "", "", err
		}
		cache = filepath.Join(home, ".cache", "llm-ring")
	}
	d := filepath.Join(cache, "envtest", version)
	if !hasBinaries(d) {
		return "", fmt.Sprintf("no envtest binaries in %s: run `bash hack/envtest-assets.sh` (and export KUBEBUILDER_ASSETS)", d), nil
	}
	return d, "", nil
}

func hasBinaries(d string) bool {
	for _, bin := range []string{"kube-apiserver", "etcd"} {
		if fi, err := os.Stat(filepath.Join(d, bin)); err != nil || fi.IsDir() || fi.Mode()&0o111 == 0 {
			return false
		}
	}
	return true
}

// KubernetesVersion reads the k8s.io/kubernetes requirement ("1.37.2") of
// the go.mod at path.
func KubernetesVersion(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) >= 2 && fields[0] == "k8s.io/kubernetes" && strings.HasPrefix(fields[1], "v") {
			return strings.TrimPrefix(fields[1], "v"), nil
		}
	}
	if err := sc.Err(); err != nil {
		return "", err
	}
	return "", fmt.Errorf("%s: no k8s.io/kubernetes requirement", path)
}
