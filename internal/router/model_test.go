package router

import (
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"testing"
)

func TestSetModel(t *testing.T) {
	cases := []struct{ in, want string }{
		{`{"model":"gpt-4o","messages":[]}`, `{"model":"llama","messages":[]}`},
		{`{ "messages" : [1, 2.50e1], "model" :  "gpt-4o" , "x":{"model":"keep"}}`, `{ "messages" : [1, 2.50e1], "model" :  "llama" , "x":{"model":"keep"}}`},
		{`{"mod\u0065l":"a","n":1}`, `{"mod\u0065l":"llama","n":1}`},
		{`{"model":"a","model":null}`, `{"model":"llama","model":"llama"}`},
		{`{"model":null}`, `{"model":"llama"}`},
		{`{"messages":[],"stream":true}`, `{"model":"llama","messages":[],"stream":true}`},
		{` {}`, ` {"model":"llama"}`},
		{`{ }`, `{"model":"llama" }`},
		{`{"µ":1,"model":"a"}`, `{"model":"llama","µ":1}`}, // the scanner declines: encoding/json
	}
	for _, c := range cases {
		got, err := setModel([]byte(c.in), "llama")
		if err != nil || string(got) != c.want {
			t.Errorf("setModel(%s) = %s, %v; want %s", c.in, got, err, c.want)
		}
	}
	got, err := setModel([]byte(`{"model":"a"}`), "say \"hi\" \u2028")
	if err != nil || string(got) != `{"model":"say \"hi\" \u2028"}` {
		t.Errorf("escaping: %s, %v", got, err)
	}
	for _, bad := range []string{``, `[]`, `"x"`, `{"model":`, `null`} {
		if got, err := setModel([]byte(bad), "m"); err == nil {
			t.Errorf("setModel(%q) = %s, want an error", bad, got)
		}
	}
}

// FuzzSetModel: on any JSON object, the rewritten body is the same object
// with its model replaced (added when absent).
func FuzzSetModel(f *testing.F) {
	for _, b := range append(append([]string{}, fastBodies...), `{"model":"a","model":"b"}`, `{"µ":{"model":1}}`, `{}`) {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, body string) {
		var want map[string]json.RawMessage
		if json.Unmarshal([]byte(body), &want) != nil || want == nil {
			return
		}
		got, err := setModel([]byte(body), "m-1")
		if err != nil {
			t.Fatalf("%q: %v", body, err)
		}
		var have map[string]json.RawMessage
		if err := json.Unmarshal(got, &have); err != nil {
			t.Fatalf("%q -> %q: %v", body, got, err)
		}
		want["model"] = json.RawMessage(`"m-1"`)
		if !maps.EqualFunc(have, want, func(a, b json.RawMessage) bool { return compact(a) == compact(b) }) {
			t.Fatalf("%q -> %q", body, got)
		}
	})
}

func compact(b json.RawMessage) string {
	var v any
	if json.Unmarshal(b, &v) != nil {
		return string(b)
	}
	out, _ := json.Marshal(v)
	return string(out)
}

func TestBodyModel(t *testing.T) {
	for body, want := range map[string]string{
		`{"model":"e5","input":"x"}`: "e5", `{"input":"x","model":"b\u00e9"}`: "bé", `{"model":5}`: "", `{"input":"x"}`: "",
		`[]`: "", `{"model":"a"`: "", ``: "",
	} {
		if got := bodyModel([]byte(body)); got != want {
			t.Errorf("bodyModel(%s) = %q, want %q", body, got, want)
		}
	}
}

// TestParseModel: every API's body names its model where the parse reads
// it; the llama.cpp /completion has none; a model that is not a string is
// a 400 naming the field.
func TestParseModel(t *testing.T) {
	cases := []struct {
		kind apiKind
		body string
		want string
	}{
		{kindChat, `{"model":"a","messages":[{"role":"user","content":"x"}]}`, "a"},
		{kindChat, `{"messages":[{"role":"user","content":"x"}],"model":"\u00e9","µ":1}`, "é"}, // parseJSON
		{kindCompletions, `{"model":"b","prompt":"x"}`, "b"},
		{kindMessages, `{"model":"claude-x","max_tokens":4,"messages":[{"role":"user","content":"x"}]}`, "claude-x"},
		{kindOllamaChat, `{"model":"qwen:0.5b","messages":[{"role":"user","content":"x"}]}`, "qwen:0.5b"},
		{kindOllamaGenerate, `{"model":"qwen:0.5b","prompt":"x"}`, "qwen:0.5b"},
		{kindCompletion, `{"model":"ignored","prompt":"x"}`, ""},
		{kindChat, `{"model":null,"messages":[{"role":"user","content":"x"}]}`, ""},
	}
	for _, c := range cases {
		p, err := parseRequest(c.kind, http.Header{}, []byte(c.body), &testRules, nil)
		if err != nil || p.model != c.want {
			t.Errorf("kind %d %s: model %q, %v; want %q", c.kind, c.body, p.model, err, c.want)
		}
	}
	for _, kind := range []apiKind{kindChat, kindCompletions, kindMessages, kindOllamaChat, kindOllamaGenerate} {
		_, err := parseRequest(kind, http.Header{}, []byte(`{"model":7,"prompt":"x","messages":[{"role":"user","content":"x"}]}`), &testRules, nil)
		if err == nil || err.Error() != "model: must be a string" {
			t.Errorf("kind %d: %v, want the model's 400", kind, err)
		}
	}
}

// TestModelNames: a name seen once is returned again without allocating;
// the table is bounded; the fast path reads models through it.
func TestModelNames(t *testing.T) {
	var n modelNames
	b := []byte("llama-3.1-8b-instruct")
	first := n.intern(b)
	if allocs := testing.AllocsPerRun(100, func() { n.intern(b) }); allocs != 0 || n.intern(b) != first {
		t.Errorf("interned name: %v allocations, %q", allocs, n.intern(b))
	}
	for i := range 2 * maxModelNames {
		n.intern(fmt.Appendf(nil, "m-%d", i))
	}
	if len(n.m) != maxModelNames || n.intern([]byte("m-999")) != "m-999" {
		t.Errorf("table of %d names", len(n.m))
	}
	rules := testRules
	rules.names = &modelNames{}
	p, ok := parseChatFast(http.Header{}, []byte(`{"model":"qwen","messages":[{"role":"user","content":"x"}]}`), &rules, nil)
	if !ok || p.model != "qwen" || rules.names.m["qwen"] != "qwen" {
		t.Errorf("fast path: %q, %v, %v", p.model, ok, rules.names.m)
	}
}
