package config

import (
	"fmt"
	"regexp"
	"strings"
	"time"
)

// Where a replica's models come from (discovery.model_source; issue 23,
// docs/pools-discovery.md).
const (
	// ModelSourceReplicas polls each replica's model list (GET /v1/models;
	// Ollama: /api/tags) every model_refresh. A static replica that lists
	// its models is not polled.
	ModelSourceReplicas = "replicas"
	// ModelSourceLabels reads the Kubernetes label model_label (on the
	// EndpointSlice, else on the pod) and the pod annotation
	// "<model_label>s". Kubernetes discovery only.
	ModelSourceLabels = "labels"
	// ModelSourceStatic takes discovery.static[].models as configured.
	ModelSourceStatic = "static"
	// ModelSourceNone leaves every replica's models unknown: each serves
	// whatever a request asks for (one catch-all pool, as before pools).
	ModelSourceNone = "none"
)

// ModelSources lists the values discovery.model_source may take.
var ModelSources = []string{ModelSourceReplicas, ModelSourceLabels, ModelSourceStatic, ModelSourceNone}

// Defaults of the optional model keys.
const (
	DefaultModelRefresh = 30 * time.Second
	DefaultModelLabel   = "llm-ring.io/model"
)

// Bounds of discovery.model_refresh.
const (
	minModelRefresh = time.Second
	maxModelRefresh = 24 * time.Hour
)

// ModelDiscovery is the resolved model_* keys of the discovery block, with
// the defaults of the keys not given.
type ModelDiscovery struct {
	Source  string        // one of ModelSources
	Refresh time.Duration // between two polls of one replica (replicas)
	Label   string        // the label key (labels); Label+"s" the annotation
}

// Models resolves the model_* keys.
func (d *Discovery) Models() ModelDiscovery {
	m := ModelDiscovery{Source: d.ModelSource, Refresh: DefaultModelRefresh, Label: d.ModelLabel}
	if m.Source == "" {
		m.Source = ModelSourceNone
	}
	if d.ModelRefresh != nil {
		m.Refresh = d.ModelRefresh.D()
	}
	if m.Label == "" {
		m.Label = DefaultModelLabel
	}
	return m
}

// KubernetesModelLabel is the label the Kubernetes source reads models
// from: model_label with model_source labels, else "" (none read).
func (d *Discovery) KubernetesModelLabel() string {
	if m := d.Models(); m.Source == ModelSourceLabels {
		return m.Label
	}
	return ""
}

// validateModels checks the model_* keys and the static replicas' models.
func (d *Discovery) validateModels(bad func(key, format string, args ...any)) {
	m := d.Models()
	switch m.Source {
	case ModelSourceLabels:
		if d.Mode != "kubernetes" {
			bad("discovery.model_source", "labels needs discovery.mode kubernetes, got %q", d.Mode)
		}
	case ModelSourceStatic:
		if d.Mode != "static" {
			bad("discovery.model_source", "static needs discovery.mode static, got %q", d.Mode)
		}
	case ModelSourceReplicas, ModelSourceNone:
	default:
		bad("discovery.model_source", "must be one of %s, got %q", strings.Join(ModelSources, ", "), d.ModelSource)
	}
	if r := d.ModelRefresh; r != nil && (r.D() < minModelRefresh || r.D() > maxModelRefresh) {
		bad("discovery.model_refresh", "must be between %v and %v, got %v", minModelRefresh, maxModelRefresh, r.D())
	}
	if d.ModelLabel != "" {
		if err := checkLabelKey(d.ModelLabel); err != nil {
			bad("discovery.model_label", "%v", err)
		}
	}
	if d.Mode != "static" {
		return
	}
	for i, r := range d.Static {
		key := fmt.Sprintf("discovery.static[%d].models", i)
		if r.Models != nil && m.Source == ModelSourceNone {
			bad(key, "listed, but discovery.model_source is none (static reads them)")
		}
		seen := make(map[string]bool, len(r.Models))
		for j, mod := range r.Models {
			switch {
			case strings.TrimSpace(mod.Name) == "":
				bad(fmt.Sprintf("%s[%d].name", key, j), "must not be empty")
			case seen[mod.Name]:
				bad(fmt.Sprintf("%s[%d].name", key, j), "duplicate model %q", mod.Name)
			case mod.Parent == mod.Name:
				bad(fmt.Sprintf("%s[%d].parent", key, j), "%q cannot be its own parent", mod.Name)
			}
			seen[mod.Name] = true
		}
	}
}

// A label key's name part (and the annotation's): at most 63 characters,
// alphanumeric at both ends, '-', '_' and '.' between. Its prefix is a DNS
// subdomain (Kubernetes' qualified names, apimachinery's IsQualifiedName).
var (
	labelName   = regexp.MustCompile(`^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$`)
	labelPrefix = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`)
)

// checkLabelKey checks that key is a valid label key whose annotation key
// key+"s" is valid too.
func checkLabelKey(key string) error {
	prefix, name, found := strings.Cut(key, "/")
	if !found {
		prefix, name = "", key
	}
	switch {
	case found && (prefix == "" || len(prefix) > 253 || !labelPrefix.MatchString(prefix)):
		return fmt.Errorf("%q: the prefix must be a DNS subdomain (such as llm-ring.io)", key)
	case !labelName.MatchString(name):
		return fmt.Errorf("%q: the name must be alphanumeric at both ends, with '-', '_', '.' between", key)
	case len(name)+1 > 63:
		return fmt.Errorf("%q: the name must be at most 62 characters (the annotation %q adds one, of at most 63)", key, key+"s")
	}
	return nil
}
