package config

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/llm-ring/llm-ring/internal/replicaset"
)

// The shipped file polls the replicas' model lists every 30s.
func TestShippedModelDiscovery(t *testing.T) {
	c, err := Parse([]byte(example(t)))
	if err != nil {
		t.Fatal(err)
	}
	want := ModelDiscovery{Source: ModelSourceReplicas, Refresh: 30 * time.Second, Label: "llm-ring.io/model"}
	if got := c.Discovery.Models(); got != want {
		t.Errorf("shipped: %+v, want %+v", got, want)
	}
}

// withoutModelKeys drops the three model_* keys (and their comment lines)
// from the shipped file.
func withoutModelKeys(t *testing.T) string {
	var b strings.Builder
	for _, line := range strings.SplitAfter(example(t), "\n") {
		trim := strings.TrimSpace(line)
		if strings.HasPrefix(trim, "model_") || strings.HasPrefix(trim, "#   a static") || strings.HasPrefix(trim, "# labels:") ||
			strings.HasPrefix(trim, "# static:") || strings.HasPrefix(trim, "# Where each replica") {
			continue
		}
		b.WriteString(line)
	}
	return b.String()
}

// Absent keys: no model discovery (every replica serves anything, as
// before pools), 30s, llm-ring.io/model.
func TestModelKeysAbsent(t *testing.T) {
	doc := withoutModelKeys(t)
	if strings.Contains(doc, "model_source:") || strings.Contains(doc, "model_refresh:") || strings.Contains(doc, "model_label:") {
		t.Fatalf("model keys left in:\n%s", doc)
	}
	c, err := Parse([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	want := ModelDiscovery{Source: ModelSourceNone, Refresh: DefaultModelRefresh, Label: DefaultModelLabel}
	if got := c.Discovery.Models(); got != want {
		t.Errorf("absent: %+v, want %+v", got, want)
	}
	if c.Discovery.KubernetesModelLabel() != "" {
		t.Error("no label is read without model_source labels")
	}
}

func TestModelKeysErrors(t *testing.T) {
	k8s := func(s string) string {
		i := strings.Index(s, "  static:")
		return strings.Replace(s[:i], "mode: static ", "mode: kubernetes ", 1) +
			"  kubernetes: {namespace: llm-ring, service: llm, port_name: http, kubeconfig: \"\"}\n"
	}
	set := func(key, value string) func(string) string {
		return func(s string) string {
			i := strings.Index(s, "  "+key+":")
			j := i + strings.Index(s[i:], "#")
			return s[:i] + "  " + key + ": " + value + "   " + s[j:]
		}
	}
	models := func(list string) func(string) string {
		return func(s string) string {
			return strings.Replace(s, `url: "http://127.0.0.1:8082"}`, `url: "http://127.0.0.1:8082", models: `+list+`}`, 1)
		}
	}
	tests := []struct {
		name string
		edit func(string) string
		want string
	}{
		// A value not among the four.
		{"unknown source", set("model_source", "dns"), `discovery.model_source: must be one of replicas, labels, static, none, got "dns"`},
		// Labels exist only in Kubernetes; static models only in the static list.
		{"labels without kubernetes", set("model_source", "labels"), `discovery.model_source: labels needs discovery.mode kubernetes, got "static"`},
		{"static with kubernetes", func(s string) string { return set("model_source", "static")(k8s(s)) }, `discovery.model_source: static needs discovery.mode static, got "kubernetes"`},
		// The refresh is a duration within bounds.
		{"refresh not a duration", set("model_refresh", "often"), `discovery.model_refresh: invalid duration "often"`},
		{"refresh too short", set("model_refresh", "100ms"), "discovery.model_refresh: must be between 1s and 24h0m0s, got 100ms"},
		{"refresh zero", set("model_refresh", "0s"), "discovery.model_refresh: must be between"},
		// The label must be a label key, and its plural an annotation key.
		{"label with space", set("model_label", `"my model"`), `discovery.model_label: "my model": the name must be alphanumeric`},
		{"label bad prefix", set("model_label", "Example.COM/model"), "discovery.model_label: \"Example.COM/model\": the prefix must be a DNS subdomain"},
		{"label two slashes", set("model_label", "a.io/b/c"), "discovery.model_label: \"a.io/b/c\": the name must be"},
		{"label too long for its annotation", set("model_label", "x/"+strings.Repeat("m", 63)), "the name must be at most 62 characters"},
		// Static models: each named once, not its own parent, not ignored.
		{"model without name", models(`[{name: ""}]`), "discovery.static[1].models[0].name: must not be empty"},
		{"model missing name key", models(`[{parent: a}]`), "discovery.static[1].models[0].name: missing"},
		{"duplicate model", models(`[{name: a}, {name: b}, {name: a}]`), `discovery.static[1].models[2].name: duplicate model "a"`},
		{"own parent", models(`[{name: a, parent: a}]`), `discovery.static[1].models[0].parent: "a" cannot be its own parent`},
		{"unknown model key", models(`[{name: a, base: b}]`), "discovery.static[1].models[0].base: unknown key"},
		{"models with source none", func(s string) string { return set("model_source", "none")(models(`[{name: a}]`)(s)) },
			"discovery.static[1].models: listed, but discovery.model_source is none"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			doc := tt.edit(example(t))
			_, err := Parse([]byte(doc))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v\nwant it to contain %q\n%s", err, tt.want, doc[strings.Index(doc, "discovery:"):])
			}
		})
	}
}

// Static models decode (adapters with their parent) and pass through.
func TestStaticModelsDecode(t *testing.T) {
	doc := strings.Replace(example(t), `url: "http://127.0.0.1:8082"}`,
		`url: "http://127.0.0.1:8082", models: [{name: llama-3.1-8b}, {name: sql-lora, parent: llama-3.1-8b}]}`, 1)
	for _, source := range []string{"static", "replicas"} {
		c, err := Parse([]byte(strings.Replace(doc, "model_source: replicas ", "model_source: "+source+" ", 1)))
		if err != nil {
			t.Fatalf("%s: %v", source, err)
		}
		if c.Discovery.Models().Source != source {
			t.Fatalf("source %q not read", source)
		}
		want := []replicaset.Model{{Name: "llama-3.1-8b"}, {Name: "sql-lora", Parent: "llama-3.1-8b"}}
		st := c.Discovery.Static
		if st[0].Models != nil || !slices.Equal(st[1].Models, want) || st[2].Models != nil {
			t.Errorf("%s: static models %+v, want nil, %v, nil", source, st, want)
		}
	}
}

// With model_source labels, the Kubernetes source reads the label.
func TestLabelsSource(t *testing.T) {
	ex := example(t)
	i := strings.Index(ex, "  static:")
	doc := strings.Replace(strings.Replace(ex[:i], "mode: static ", "mode: kubernetes ", 1), "model_source: replicas ", "model_source: labels ", 1) +
		"  kubernetes: {namespace: llm-ring, service: llm, port_name: http, kubeconfig: \"\"}\n"
	doc = strings.Replace(doc, "model_label: llm-ring.io/model", "model_label: example.com/served-model", 1)
	c, err := Parse([]byte(doc))
	if err != nil {
		t.Fatalf("%v\n%s", err, doc)
	}
	if got := c.Discovery.KubernetesModelLabel(); got != "example.com/served-model" {
		t.Errorf("label %q", got)
	}
	for _, ok := range []string{"llm-ring.io/model", "model", "a.b-c.io/x_y.z", strings.Repeat("m", 62)} {
		if err := checkLabelKey(ok); err != nil {
			t.Errorf("%q rejected: %v", ok, err)
		}
	}
}
