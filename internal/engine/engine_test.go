package engine

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"testing"
)

func read(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// chunked is a body that hands out its bytes in the given read sizes.
type chunked struct {
	b     []byte
	sizes []int
}

func (c *chunked) Read(p []byte) (int, error) {
	if len(c.b) == 0 {
		return 0, io.EOF
	}
	n := len(c.b)
	if len(c.sizes) > 0 {
		n = min(c.sizes[0], n)
		c.sizes = c.sizes[1:]
	}
	n = copy(p, c.b[:n])
	c.b = c.b[n:]
	return n, nil
}

func (c *chunked) Close() error { return nil }

func filter(t *testing.T, in []byte, sizes []int, strip bool) ([]byte, []Usage) {
	t.Helper()
	var got []Usage
	f := NewFilter(&chunked{b: in, sizes: sizes}, strip, func(u Usage) { got = append(got, u) })
	out, err := io.ReadAll(f)
	if err != nil {
		t.Fatal(err)
	}
	return out, got
}

func TestFilterGivesTheStreamTheClientAskedFor(t *testing.T) {
	// Issue #14: behind each engine, the stream with the injected
	// include_usage, filtered, is byte for byte the stream without it, for
	// every split of the body into two reads and for one byte at a time;
	// and the router learns the counts.
	want := Usage{Prompt: 15, Cached: 10, Completion: 2, CachedKnown: true}
	for _, engine := range []string{"llamacpp", "vllm", "sglang"} {
		t.Run(engine, func(t *testing.T) {
			plain := read(t, engine+"_chat_stream.txt")
			asked := read(t, engine+"_chat_stream_usage.txt")
			splits := [][]int{nil}
			for k := 1; k < len(asked); k++ {
				splits = append(splits, []int{k})
			}
			ones := make([]int, len(asked))
			for i := range ones {
				ones[i] = 1
			}
			splits = append(splits, ones)
			for _, s := range splits {
				out, us := filter(t, asked, s, true)
				if !bytes.Equal(out, plain) {
					t.Fatalf("split %v: filtered stream differs:\n%s\n--- want\n%s", s[:min(len(s), 1)], out, plain)
				}
				if len(us) == 0 || us[len(us)-1] != want {
					t.Fatalf("split %v: usage %+v, want last %+v", s[:min(len(s), 1)], us, want)
				}
			}
			// Not injected: the stream passes unchanged.
			if out, _ := filter(t, asked, nil, false); !bytes.Equal(out, asked) {
				t.Errorf("strip=false changed the stream")
			}
		})
	}
}

func TestFilterLearnsFromAnthropicStreams(t *testing.T) {
	in := read(t, "anthropic_stream.txt")
	out, us := filter(t, in, []int{7, 100, 3}, false)
	if !bytes.Equal(out, in) {
		t.Error("stream changed")
	}
	want := Usage{Prompt: 15, Cached: 10, Completion: 2, CachedKnown: true}
	if len(us) != 1 || us[0] != want {
		t.Errorf("usage %+v, want [%+v]", us, want)
	}
}

func TestUsageOfEachEngine(t *testing.T) {
	tests := []struct {
		file string
		want Usage
	}{
		// llama.cpp: timings split cached and processed tokens.
		{"llamacpp_chat.json", Usage{15, 10, 2, true}},
		// vLLM with --enable-prompt-tokens-details.
		{"vllm_chat.json", Usage{15, 10, 2, true}},
		// vLLM without it: prompt_tokens_details is null, cached unknown.
		{"vllm_chat_no_details.json", Usage{15, 0, 2, false}},
		// SGLang with --enable-cache-report.
		{"sglang_chat.json", Usage{15, 10, 2, true}},
		// SGLang's native /generate: meta_info.cached_tokens.
		{"sglang_generate.json", Usage{15, 10, 2, true}},
		// Anthropic: input + cache creation + cache read is the prompt.
		{"anthropic_message.json", Usage{15, 10, 2, true}},
	}
	for _, tt := range tests {
		got, err := UsageOf(read(t, tt.file))
		if err != nil || got != tt.want {
			t.Errorf("%s: %+v, %v; want %+v", tt.file, got, err, tt.want)
		}
	}
	if _, err := UsageOf([]byte(`{"choices":[]}`)); err != ErrNoUsage {
		t.Errorf("no counts: err %v", err)
	}
}

func TestPrepareStream(t *testing.T) {
	tests := []struct {
		name, in, want string
		injected       bool
	}{
		{"not streamed", `{"messages":[]}`, `{"messages":[]}`, false},
		{"already asks", `{"stream":true,"stream_options":{"include_usage":true}}`, `{"stream":true,"stream_options":{"include_usage":true}}`, false},
		{"no options: appended", `{"model":"m", "stream": true }`, `{"model":"m", "stream": true ,"stream_options":{"include_usage":true}}`, true},
		{"options without the flag", `{"stream":true,"stream_options":{"continuous_usage_stats":false}}`, `{"stream":true,"stream_options":{"include_usage":true,"continuous_usage_stats":false}}`, true},
		{"flag false", `{"stream_options": {"include_usage": false}, "stream":true}`, `{"stream_options": {"include_usage": true}, "stream":true}`, true},
		{"options null", `{"stream":true,"stream_options":null,"x":1}`, `{"stream":true,"stream_options":{"include_usage":true},"x":1}`, true},
		{"empty options", `{"stream":true,"stream_options":{}}`, `{"stream":true,"stream_options":{"include_usage":true}}`, true},
	}
	for _, tt := range tests {
		got, inj, err := PrepareStream([]byte(tt.in))
		if err != nil || string(got) != tt.want || inj != tt.injected {
			t.Errorf("%s: %s %v %v; want %s %v", tt.name, got, inj, err, tt.want, tt.injected)
		}
	}
	if _, _, err := PrepareStream([]byte(`[1]`)); err == nil {
		t.Error("an array was accepted")
	}
}

func TestParseMessages(t *testing.T) {
	r, err := ParseMessages([]byte(`{"model":"c","max_tokens":64,"stream":true,
		"system":[{"type":"text","text":"Be brief."}],
		"messages":[{"role":"user","content":[{"type":"text","text":"Hi"},{"type":"image","source":{}}]},
		            {"role":"assistant","content":"Hello"},
		            {"role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":[{"type":"text","text":"42"}]}]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	if r.System != "Be brief." || r.MaxTokens != 64 || !r.Stream || len(r.Messages) != 3 ||
		r.Messages[0] != (Message{"user", "Hi"}) || r.Messages[2].Text != "42" {
		t.Errorf("parsed %+v", r)
	}
	if r.ConversationKey() != "Be brief.\x00Hi" {
		t.Errorf("key %q", r.ConversationKey())
	}
	for _, bad := range []string{`{"messages":[]}`, `{"messages":[{"content":"x"}]}`, `{"messages":[{"role":"user","content":3}]}`} {
		if _, err := ParseMessages([]byte(bad)); err == nil {
			t.Errorf("%s accepted", bad)
		}
	}
}

func TestMergeModels(t *testing.T) {
	a := []byte(`{"models":[{"name":"q"}],"object":"list","data":[{"id":"qwen","object":"model","owned_by":"llamacpp"}]}`)
	b := []byte(`{"object":"list","data":[{"id":"llama","object":"model","owned_by":"vllm"},{"id":"qwen","object":"model","owned_by":"vllm"}]}`)
	got, err := MergeModels(a, b)
	want := `{"object":"list","data":[{"id":"llama","object":"model","owned_by":"vllm"},{"id":"qwen","object":"model","owned_by":"llamacpp"}]}`
	if err != nil || string(got) != want {
		t.Errorf("%s %v", got, err)
	}
	if _, err := MergeModels([]byte(`{"data":[{}]}`)); err == nil {
		t.Error("an entry without id was accepted")
	}
}

func BenchmarkFilter(b *testing.B) {
	in, _ := os.ReadFile("testdata/llamacpp_chat_stream_usage.txt")
	b.ReportAllocs()
	b.SetBytes(int64(len(in)))
	for b.Loop() {
		f := NewFilter(&chunked{b: in}, true, func(Usage) {})
		_, _ = io.Copy(io.Discard, f)
	}
}
