// Command tinymodel writes a tiny language model for end-to-end tests of
// the router in front of a real engine (Ollama, or llama.cpp's server): a
// GGUF file with random weights and a byte-level tokenizer, and an Ollama
// Modelfile for it. Nothing is downloaded.
//
//	go run ./hack/tinymodel -out DIR [-seed N]
//	ollama create tiny -f DIR/Modelfile
//
// The model is a llama-architecture transformer (2 layers, 64 wide) whose
// vocabulary is one token per printable ASCII byte, plus tab, line feed
// and carriage return, in GPT-2's byte-level spelling, with no merges: any
// ASCII text tokenizes to one token per byte, so the text a reply decodes
// to tokenizes back to the very tokens generated, and a conversation's next
// prompt extends what the engine cached. The two special tokens (BOS, EOS)
// are never generated: embedding dimension 0 is a constant that no layer
// writes to, and the output head weighs it positively for every byte token
// and strongly negatively for the specials, so a reply is always ASCII
// text of exactly the requested length.
package main

import (
	"errors"
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
)

// Dimensions of the model.
const (
	nEmbd    = 64
	nFF      = 128
	nLayer   = 2
	nHead    = 4
	nCtx     = 8192
	nSpecial = 2 // <s>, </s>
)

// modelfile is the Ollama Modelfile written beside the model: a template
// that renders a chat as the concatenation of its messages, so that turn
// n+1's prompt extends turn n's prompt and reply (a system prompt, and
// /api/generate's system and prompt, are messages too), and one thread: the
// model is so small that more threads only contend (16 tokens took 2.8 s
// with Ollama's default thread count on a loaded 2-core machine, 4 ms
// with one).
const modelfile = `FROM ./tiny.gguf
TEMPLATE """{{- range .Messages }}<|{{ .Role }}|>{{ .Content }}{{ end }}<|assistant|>"""
PARAMETER num_ctx 4096
PARAMETER num_thread 1
`

func main() {
	out := flag.String("out", "", "directory to write tiny.gguf and Modelfile into (created)")
	seed := flag.Uint64("seed", 1, "seed of the random weights")
	flag.Parse()
	if err := run(*out, *seed); err != nil {
		fmt.Fprintln(os.Stderr, "tinymodel:", err)
		os.Exit(2)
	}
}

func run(out string, seed uint64) error {
	if out == "" {
		return errors.New("-out: missing (the directory to write the model into)")
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	f, err := os.Create(filepath.Join(out, "tiny.gguf"))
	if err != nil {
		return err
	}
	tokens, types := vocabulary()
	rng := rand.New(rand.NewPCG(seed, 0x6c6c6d2d72696e67))
	err = writeGGUF(f, metadata(tokens, types), tensors(rng, len(tokens)))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(out, "Modelfile"), []byte(modelfile), 0o644)
}

// byteRune is GPT-2's byte-level spelling of byte b: printable bytes stand
// for themselves, the others are shifted to 256 and up in byte order.
func byteRune(b int) rune {
	printable := func(c int) bool { return (c >= 33 && c <= 126) || (c >= 161 && c <= 172) || c >= 174 }
	if printable(b) {
		return rune(b)
	}
	n := 0
	for c := 0; c < b; c++ {
		if !printable(c) {
			n++
		}
	}
	return rune(256 + n)
}

// vocabulary is the special tokens, then tab, LF, CR and bytes 32..126.
func vocabulary() (tokens []string, types []int32) {
	tokens = []string{"<s>", "</s>"}
	types = []int32{3, 3} // control
	for b := 0; b < 127; b++ {
		if b == '\t' || b == '\n' || b == '\r' || b >= 32 {
			tokens = append(tokens, string(byteRune(b)))
			types = append(types, 1) // normal
		}
	}
	return tokens, types
}

func metadata(tokens []string, types []int32) []kv {
	return []kv{
		{"general.architecture", "llama"},
		{"general.name", "llm-ring tiny"},
		{"general.alignment", uint32(ggufAlignment)},
		{"llama.context_length", uint32(nCtx)},
		{"llama.embedding_length", uint32(nEmbd)},
		{"llama.block_count", uint32(nLayer)},
		{"llama.feed_forward_length", uint32(nFF)},
		{"llama.attention.head_count", uint32(nHead)},
		{"llama.attention.head_count_kv", uint32(nHead)},
		{"llama.rope.dimension_count", uint32(nEmbd / nHead)},
		{"llama.rope.freq_base", float32(10000)},
		{"llama.attention.layer_norm_rms_epsilon", float32(1e-5)},
		{"llama.vocab_size", uint32(len(tokens))},
		{"tokenizer.ggml.model", "gpt2"},
		{"tokenizer.ggml.pre", "default"},
		{"tokenizer.ggml.tokens", tokens},
		{"tokenizer.ggml.token_type", types},
		{"tokenizer.ggml.merges", []string{}},
		{"tokenizer.ggml.bos_token_id", uint32(0)},
		{"tokenizer.ggml.eos_token_id", uint32(1)},
		{"tokenizer.ggml.add_bos_token", true},
		{"tokenizer.ggml.add_eos_token", false},
	}
}

// tensors are the model's random weights (see the package comment for
// dimension 0 and the output head).
func tensors(rng *rand.Rand, nVocab int) []tensor {
	normal := func(n int, std float64) []float32 {
		out := make([]float32, n)
		for i := range out {
			out[i] = float32(rng.NormFloat64() * std)
		}
		return out
	}
	ones := func(n int) []float32 {
		out := make([]float32, n)
		for i := range out {
			out[i] = 1
		}
		return out
	}
	mat := func(name string, in, out int, zeroRow0 bool) tensor {
		d := normal(in*out, 1/math.Sqrt(float64(in)))
		if zeroRow0 {
			clear(d[:in]) // output dimension 0 stays what the embedding put there
		}
		return tensor{Name: name, Dims: []uint64{uint64(in), uint64(out)}, Data: d}
	}
	embd := normal(nEmbd*nVocab, 0.5)
	head := normal(nEmbd*nVocab, 0.15) // logits of spread ~1: sampled replies vary
	for v := range nVocab {
		embd[v*nEmbd] = 4
		head[v*nEmbd] = 3
		if v < nSpecial {
			head[v*nEmbd] = -30
		}
	}
	ts := []tensor{{Name: "token_embd.weight", Dims: []uint64{nEmbd, uint64(nVocab)}, Data: embd}}
	for l := range nLayer {
		p := fmt.Sprintf("blk.%d.", l)
		ts = append(ts,
			tensor{Name: p + "attn_norm.weight", Dims: []uint64{nEmbd}, Data: ones(nEmbd)},
			mat(p+"attn_q.weight", nEmbd, nEmbd, false),
			mat(p+"attn_k.weight", nEmbd, nEmbd, false),
			mat(p+"attn_v.weight", nEmbd, nEmbd, false),
			mat(p+"attn_output.weight", nEmbd, nEmbd, true),
			tensor{Name: p + "ffn_norm.weight", Dims: []uint64{nEmbd}, Data: ones(nEmbd)},
			mat(p+"ffn_gate.weight", nEmbd, nFF, false),
			mat(p+"ffn_up.weight", nEmbd, nFF, false),
			mat(p+"ffn_down.weight", nFF, nEmbd, true),
		)
	}
	return append(ts,
		tensor{Name: "output_norm.weight", Dims: []uint64{nEmbd}, Data: ones(nEmbd)},
		tensor{Name: "output.weight", Dims: []uint64{nEmbd, uint64(nVocab)}, Data: head})
}
