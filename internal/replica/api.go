package replica

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"slices"
	"strings"
	"sync"

	"github.com/llm-ring/llm-ring/internal/model"
	"github.com/llm-ring/llm-ring/internal/wire"
)

// This file holds the endpoints beyond the three completion paths: the
// middleware of llama.cpp's HTTP layer (CORS, API key), the model list,
// /props, /detokenize, /apply-template, embeddings, rerank. docs/replica-model.md
// ("Endpoints, against llama.cpp") says, endpoint by endpoint, what follows
// llama.cpp and what is simulated.

// publicPaths are answered without an API key (llama.cpp's
// tools/server/server-http.cpp, middleware_validate_api_key).
var publicPaths = map[string]bool{
	"/health": true, "/v1/health": true, "/models": true, "/v1/models": true, "/api/tags": true, "/": true,
}

// authorized reports whether req carries one of the host's API keys (or the
// host has none, or the path is public).
func (r *Replica) authorized(req *http.Request) bool {
	keys := r.h.apiKeys
	if len(keys) == 0 || publicPaths[req.URL.Path] {
		return true
	}
	if k, ok := strings.CutPrefix(req.Header.Get("Authorization"), "Bearer "); ok && slices.Contains(keys, k) {
		return true
	}
	return slices.Contains(keys, req.Header.Get("X-Api-Key"))
}

// vocab remembers the text of the token ids the replica has produced or
// tokenized, so that /detokenize can give them back: the simulated tokenizer
// hashes pieces to ids and cannot be inverted. It is bounded; ids it has not
// seen detokenize to a placeholder.
type vocab struct {
	mu     sync.Mutex
	pieces map[model.Token]string
}

const maxVocab = 1 << 18

func newVocab() *vocab { return &vocab{pieces: map[model.Token]string{}} }

func (v *vocab) learn(toks []model.Token, text string, ends []int32) {
	v.mu.Lock()
	defer v.mu.Unlock()
	start := int32(0)
	for i, t := range toks {
		if len(v.pieces) >= maxVocab {
			return
		}
		v.pieces[t] = text[start:ends[i]]
		start = ends[i]
	}
}

func (v *vocab) learnOutput(out *model.Output) {
	if len(out.Tokens) == 0 {
		return
	}
	out.Piece(0) // computes Ends
	v.learn(out.Tokens, out.Text, out.Ends)
}

func (v *vocab) text(toks []int) string {
	v.mu.Lock()
	defer v.mu.Unlock()
	var b strings.Builder
	for _, id := range toks {
		switch t := model.Token(id); {
		case t == model.TokImStart:
			b.WriteString(model.ImStart)
		case t == model.TokImEnd:
			b.WriteString(model.ImEnd)
		case t == model.TokEndOfText:
			b.WriteString(model.EndOfText)
		default:
			if p, ok := v.pieces[t]; ok {
				b.WriteString(p)
			} else {
				fmt.Fprintf(&b, "<tok_%d>", id)
			}
		}
	}
	return b.String()
}

// detokenize serves POST /detokenize: {"tokens": [ids]} → {"content": text}.
func (r *Replica) detokenize(w http.ResponseWriter, req *http.Request) {
	var body struct {
		Tokens []int `json:"tokens"`
	}
	if !decode(w, req, &body) {
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"content": r.h.vocab.text(body.Tokens)})
}

// models serves GET /v1/models and /models. llama.cpp answers both an
// Ollama-style "models" list and the OpenAI "data" list (server-context.cpp,
// get_models); vLLM and SGLang answer the OpenAI list.
func (r *Replica) models(w http.ResponseWriter, _ *http.Request) {
	created := r.h.start.Unix()
	switch r.h.api {
	case APIVLLM, APISGLang:
		writeJSON(w, http.StatusOK, struct {
			Object string        `json:"object"`
			Data   []engineModel `json:"data"`
		}{"list", r.engineCards(created)})
		return
	}
	cfg := r.h.modelConfig
	writeJSON(w, http.StatusOK, map[string]any{
		"models": []map[string]any{{
			"name": r.h.alias, "model": r.h.alias, "modified_at": "", "size": "", "digest": "",
			"type": "model", "description": "", "tags": []string{""}, "capabilities": []string{"completion"},
			"parameters": "", "details": map[string]any{
				"parent_model": "", "format": "gguf", "family": "", "families": []string{""},
				"parameter_size": "", "quantization_level": "",
			},
		}},
		"object": "list",
		"data": []map[string]any{{
			"id": r.h.alias, "object": "model", "created": created, "owned_by": "llamacpp",
			"meta": map[string]any{
				"vocab_type": 2, "n_vocab": model.VocabSize, "n_ctx_train": 32768, "n_ctx": cfg.SlotContext(),
				"n_embd": model.EmbeddingDim, "n_params": 494032768, "size": 0,
			},
		}},
	})
}

// engineModel is vLLM's and SGLang's model card (vllm/entrypoints/openai
// protocol.py ModelCard; sglang openai_api protocol.py ModelCard).
type engineModel struct {
	ID          string  `json:"id"`
	Object      string  `json:"object"`
	Created     int64   `json:"created"`
	OwnedBy     string  `json:"owned_by"`
	Root        string  `json:"root"`
	Parent      *string `json:"parent"` // an adapter's base model; null for a base model
	MaxModelLen *int    `json:"max_model_len"`
}

// generationSettings is llama.cpp's task_params::to_json for the server's
// defaults (server-task.cpp), with the simulated replica's n_predict.
func (r *Replica) generationSettings(nPredict int, stream bool, seed int64) map[string]any {
	return map[string]any{
		"seed": seed, "temperature": 0.8, "dynatemp_range": 0.0, "dynatemp_exponent": 1.0,
		"top_k": 40, "top_p": 0.95, "min_p": 0.05, "top_n_sigma": -1.0,
		"xtc_probability": 0.0, "xtc_threshold": 0.1, "typical_p": 1.0,
		"repeat_last_n": 64, "repeat_penalty": 1.0, "presence_penalty": 0.0, "frequency_penalty": 0.0,
		"dry_multiplier": 0.0, "dry_base": 1.75, "dry_allowed_length": 2, "dry_penalty_last_n": r.h.modelConfig.SlotContext(),
		"dry_sequence_breakers": []string{"\n", ":", "\"", "*"},
		"mirostat":              0, "mirostat_tau": 5.0, "mirostat_eta": 0.1,
		"stop": []string{}, "max_tokens": nPredict, "n_predict": nPredict, "n_keep": 0, "n_discard": 0,
		"ignore_eos": false, "stream": stream, "logit_bias": []any{}, "n_probs": 0, "min_keep": 0,
		"grammar": "", "grammar_lazy": false, "grammar_triggers": []any{}, "preserved_tokens": []any{},
		"chat_format": "Content-only", "reasoning_format": "auto", "reasoning_in_content": false,
		"thinking_forced_open": false,
		"samplers":             []string{"penalties", "dry", "top_n_sigma", "top_k", "typ_p", "top_p", "min_p", "xtc", "temperature"},
		"speculative.n_max":    16, "speculative.n_min": 0, "speculative.p_min": 0.75,
		"timings_per_token": false, "post_sampling_probs": false, "lora": []any{},
	}
}

// defaultSeed is llama.cpp's LLAMA_DEFAULT_SEED (a random seed per request).
const defaultSeed = 0xFFFFFFFF

// props serves GET /props: llama.cpp's server properties, with the default
// generation settings of a slot.
func (r *Replica) props(w http.ResponseWriter, _ *http.Request) {
	cfg := r.h.modelConfig
	writeJSON(w, http.StatusOK, map[string]any{
		"default_generation_settings": map[string]any{
			"id": 0, "id_task": -1, "n_ctx": cfg.SlotContext(), "speculative": false, "is_processing": false,
			"params": r.generationSettings(-1, true, defaultSeed), "prompt": "",
			"next_token": nextToken{HasNextToken: true, NRemain: -1},
		},
		"total_slots":   cfg.NParallel,
		"model_alias":   r.h.alias,
		"model_path":    r.h.alias,
		"modalities":    map[string]bool{"vision": false, "audio": false},
		"chat_template": chatTemplate,
		"chat_template_caps": map[string]bool{
			"supports_parallel_tool_calls": false, "supports_preserve_reasoning": false, "supports_string_content": true,
			"supports_system_role": true, "supports_tool_calls": false, "supports_tools": false, "supports_typed_content": false,
		},
		"bos_token":   model.EndOfText,
		"eos_token":   model.ImEnd,
		"build_info":  systemFingerprint,
		"is_sleeping": false,
	})
}

// applyTemplate serves POST /apply-template: the chat prompt the replica
// would process, {"prompt": "..."}.
func (r *Replica) applyTemplate(w http.ResponseWriter, req *http.Request) {
	var body chatBody
	if !decode(w, req, &body) {
		return
	}
	msgs, err := model.MessagesFromWire(body.Messages)
	if err != nil {
		writeError(w, http.StatusBadRequest, wire.ErrTypeInvalidRequest, err.Error())
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"prompt": model.RenderChat(msgs)})
}

// embeddingInputs reads the texts to embed: a string, an array of strings,
// or an array of token-id arrays (each one input).
func embeddingInputs(raw json.RawMessage) ([][]model.Token, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return nil, errors.New(`"input" or "content" must be provided`)
	}
	if raw[0] == '"' {
		toks, err := promptTokens(raw)
		return [][]model.Token{toks}, err
	}
	if raw[0] != '[' {
		return nil, errors.New("input: must be a string or an array")
	}
	var items []json.RawMessage
	if err := json.Unmarshal(raw, &items); err != nil {
		return nil, fmt.Errorf("input: %v", err)
	}
	if len(items) == 0 {
		return nil, errors.New("input: must not be empty")
	}
	// An array of numbers is one input given as token ids.
	if b := bytes.TrimSpace(items[0]); len(b) > 0 && b[0] != '"' && b[0] != '[' {
		toks, err := promptTokens(raw)
		return [][]model.Token{toks}, err
	}
	out := make([][]model.Token, len(items))
	for i, it := range items {
		toks, err := promptTokens(it)
		if err != nil {
			return nil, fmt.Errorf("input[%d]: %v", i, err)
		}
		if len(toks) == 0 {
			return nil, fmt.Errorf("input[%d] is empty", i)
		}
		out[i] = toks
	}
	return out, nil
}

// embeddings serves POST /v1/embeddings (OpenAI shape) and, when native is
// set, llama.cpp's /embedding and /embeddings: [{"index": i, "embedding":
// [[...]]}] (one pooled vector per input, wrapped in an array as llama.cpp
// does for pooled embeddings). Vectors are model.Embed's.
func (r *Replica) embeddings(native bool) http.HandlerFunc {
	return func(w http.ResponseWriter, req *http.Request) {
		var body struct {
			Input          json.RawMessage `json:"input"`
			Content        json.RawMessage `json:"content"`
			Model          string          `json:"model"`
			EncodingFormat string          `json:"encoding_format"`
		}
		if !decode(w, req, &body) {
			return
		}
		in := body.Input
		if len(in) == 0 {
			in = body.Content
		}
		inputs, err := embeddingInputs(in)
		if err != nil {
			writeError(w, http.StatusBadRequest, wire.ErrTypeInvalidRequest, err.Error())
			return
		}
		if body.EncodingFormat != "" && body.EncodingFormat != "float" && body.EncodingFormat != "base64" {
			writeError(w, http.StatusBadRequest, wire.ErrTypeInvalidRequest, "The format to return the embeddings in. Can be either float or base64")
			return
		}
		if native {
			out := make([]map[string]any, len(inputs))
			for i, toks := range inputs {
				out[i] = map[string]any{"index": i, "embedding": [][]float32{model.Embed(toks)}}
			}
			writeJSON(w, http.StatusOK, out)
			return
		}
		type item struct {
			Embedding      any    `json:"embedding"`
			Index          int    `json:"index"`
			Object         string `json:"object"`
			EncodingFormat string `json:"encoding_format,omitempty"`
		}
		data := make([]item, len(inputs))
		n := 0
		for i, toks := range inputs {
			n += len(toks)
			vec := model.Embed(toks)
			data[i] = item{Embedding: vec, Index: i, Object: "embedding"}
			if body.EncodingFormat == "base64" {
				buf := make([]byte, 4*len(vec))
				for j, v := range vec {
					binary.LittleEndian.PutUint32(buf[4*j:], math.Float32bits(v))
				}
				data[i].Embedding = base64.StdEncoding.EncodeToString(buf)
				data[i].EncodingFormat = "base64"
			}
		}
		writeJSON(w, http.StatusOK, map[string]any{
			"model": r.modelName(body.Model), "object": "list",
			"usage": map[string]int{"prompt_tokens": n, "total_tokens": n},
			"data":  data,
		})
	}
}

// rerank serves /rerank, /reranking, /v1/rerank and /v1/reranking: the
// Jina shape for {"query", "documents", "top_n"}, the TEI shape (an array)
// for {"query", "texts", "return_text"} (server-common.cpp,
// format_response_rerank). Scores are the cosine similarity of the query's
// and each document's model.Embed vector, sorted best first.
func (r *Replica) rerank(w http.ResponseWriter, req *http.Request) {
	var body struct {
		Model      string   `json:"model"`
		Query      *string  `json:"query"`
		Documents  []string `json:"documents"`
		Texts      []string `json:"texts"`
		TopN       *int     `json:"top_n"`
		ReturnText bool     `json:"return_text"`
	}
	if !decode(w, req, &body) {
		return
	}
	tei := body.Documents == nil && body.Texts != nil
	docs := body.Documents
	if tei {
		docs = body.Texts
	}
	switch {
	case body.Query == nil:
		writeError(w, http.StatusBadRequest, wire.ErrTypeInvalidRequest, `"query" must be provided`)
		return
	case docs == nil:
		writeError(w, http.StatusBadRequest, wire.ErrTypeInvalidRequest, `"documents" must be a non-empty string array`)
		return
	case len(docs) == 0:
		writeError(w, http.StatusBadRequest, wire.ErrTypeInvalidRequest, `"documents" must be a non-empty string array`)
		return
	}
	out, n := rankDocuments(*body.Query, docs)
	if body.TopN != nil && *body.TopN >= 0 && *body.TopN < len(out) {
		out = out[:*body.TopN]
	}
	if tei {
		type teiItem struct {
			Index int     `json:"index"`
			Score float64 `json:"score"`
			Text  *string `json:"text,omitempty"`
		}
		res := make([]teiItem, len(out))
		for i, o := range out {
			res[i] = teiItem{Index: o.Index, Score: o.Score}
			if body.ReturnText {
				res[i].Text = &docs[o.Index]
			}
		}
		writeJSON(w, http.StatusOK, res)
		return
	}
	type jinaItem struct {
		Index int     `json:"index"`
		Score float64 `json:"relevance_score"`
	}
	res := make([]jinaItem, len(out))
	for i, o := range out {
		res[i] = jinaItem{Index: o.Index, Score: o.Score}
	}
	writeJSON(w, http.StatusOK, map[string]any{
		"model": r.modelName(body.Model), "object": "list",
		"usage":   map[string]int{"prompt_tokens": n, "total_tokens": n},
		"results": res,
	})
}

// rankedDoc is one document's place in a rerank answer.
type rankedDoc struct {
	Index int
	Score float64
}

// rankDocuments scores each document by the cosine similarity of its
// model.Embed vector with the query's, best first (stable), and counts the
// tokens read (the query once per document, as llama.cpp does).
func rankDocuments(query string, docs []string) ([]rankedDoc, int) {
	qt := model.Tokenize(query)
	q := model.Embed(qt)
	out := make([]rankedDoc, len(docs))
	n := 0
	for i, d := range docs {
		dt := model.Tokenize(d)
		n += len(qt) + len(dt)
		out[i] = rankedDoc{Index: i, Score: model.Cosine(q, model.Embed(dt))}
	}
	slices.SortStableFunc(out, func(a, b rankedDoc) int {
		switch {
		case a.Score > b.Score:
			return -1
		case a.Score < b.Score:
			return 1
		}
		return 0
	})
	return out, n
}
