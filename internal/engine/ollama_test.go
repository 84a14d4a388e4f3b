package engine

import "testing"

func TestOllamaUsage(t *testing.T) {
	final := `{"done":true,"prompt_eval_count":40,"prompt_eval_duration":2000000,"eval_count":3,"eval_duration":3000000}`
	for name, body := range map[string]string{
		"object": final,
		"ndjson": `{"message":{"content":"a"},"done":false}` + "\n" + `{"message":{"content":"b"},"done":false}` + "\n" + final + "\n",
		"crlf":   `{"done":false}` + "\r\n" + final + "\r\n",
	} {
		u, ok := OllamaUsage([]byte(body))
		if want := (OllamaFinal{Prompt: 40, Completion: 3, PromptNS: 2e6, EvalNS: 3e6}); !ok || u != want {
			t.Errorf("%s: %+v %v, want %+v", name, u, ok, want)
		}
	}
	for _, body := range []string{"", `{"done":false,"prompt_eval_count":4}`, "not json", `{"error":"model not found"}`} {
		if u, ok := OllamaUsage([]byte(body)); ok {
			t.Errorf("%q: %+v, want no final object", body, u)
		}
	}
}

func TestMergeOllama(t *testing.T) {
	got, err := MergeOllamaModels([]byte(`{"models":[{"name":"b","size":1},{"name":"a"}]}`), []byte(`{"models":[{"name":"b","size":2}]}`))
	if want := `{"models":[{"name":"a"},{"name":"b","size":1}]}`; err != nil || string(got) != want {
		t.Errorf("merged %s %v, want %s", got, err, want)
	}
	if _, err := MergeOllamaModels([]byte(`{"models":[{"size":1}]}`)); err == nil {
		t.Error("a model without a name merged")
	}
	v, err := MergeOllamaVersion([]byte(`{"version":"0.10.1"}`), []byte(`{"version":"0.9.2"}`), []byte(`{"version":"0.10.0"}`))
	if err != nil || string(v) != `{"version":"0.9.2"}` {
		t.Errorf("version %s %v, want 0.9.2", v, err)
	}
	if _, err := MergeOllamaVersion([]byte(`{}`)); err == nil {
		t.Error("an answer without a version merged")
	}
}

func TestPresets(t *testing.T) {
	for _, n := range Names() {
		p, err := PresetOf(n)
		if err != nil || p.Name != n || p.HealthPath == "" {
			t.Errorf("%s: %+v %v", n, p, err)
		}
	}
	if p, _ := PresetOf(Ollama); p.Metrics != "" || p.HealthPath != "/api/version" {
		t.Errorf("ollama: %+v, want no metrics and /api/version", p)
	}
	if _, err := PresetOf("tgi"); err == nil {
		t.Error("an unknown engine has a preset")
	}
}
