package replica

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/llm-ring/llm-ring/internal/model"
	"github.com/llm-ring/llm-ring/internal/wire"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// maxBody is the largest request body accepted.
const maxBody = 16 << 20

// Replica is one simulated llama.cpp server on a Host: an http.Handler.
type Replica struct {
	h       *Host
	index   int
	name    string
	readyAt time.Duration // model time at which loading ends
	routes  map[string]route
	metrics http.Handler
}

type route struct {
	method string
	serve  func(http.ResponseWriter, *http.Request)
	// duringLoad: served while the model is loading.
	duringLoad bool
}

func newReplica(h *Host, index int, name string, readyAt time.Duration) *Replica {
	r := &Replica{h: h, index: index, name: name, readyAt: readyAt}
	reg := prometheus.NewRegistry()
	reg.MustRegister(&collector{r: r})
	r.metrics = promhttp.HandlerFor(reg, promhttp.HandlerOpts{})
	r.routes = map[string]route{
		wire.PathCompletion:      {http.MethodPost, r.completion, false},
		"/completions":           {http.MethodPost, r.completion, false},
		wire.PathChatCompletions: {http.MethodPost, r.chat, false},
		"/chat/completions":      {http.MethodPost, r.chat, false},
		wire.PathCompletions:     {http.MethodPost, r.oaiCompletion, false},
		wire.PathMessages:        {http.MethodPost, r.messages, false},
		wire.PathTokenize:        {http.MethodPost, r.tokenize, false},
		wire.PathDetokenize:      {http.MethodPost, r.detokenize, false},
		"/apply-template":        {http.MethodPost, r.applyTemplate, false},
		wire.PathEmbeddings:      {http.MethodPost, r.embeddings(false), false},
		"/embedding":             {http.MethodPost, r.embeddings(true), false},
		"/embeddings":            {http.MethodPost, r.embeddings(true), false},
		wire.PathRerank:          {http.MethodPost, r.rerank, false},
		"/v1/reranking":          {http.MethodPost, r.rerank, false},
		"/rerank":                {http.MethodPost, r.rerank, false},
		"/reranking":             {http.MethodPost, r.rerank, false},
		"/health":                {http.MethodGet, r.health, true},
		"/v1/health":             {http.MethodGet, r.health, true},
		wire.PathModels:          {http.MethodGet, r.models, true},
		"/models":                {http.MethodGet, r.models, true},
		"/slots":                 {http.MethodGet, r.slots, false},
		"/props":                 {http.MethodGet, r.props, false},
		"/metrics":               {http.MethodGet, r.metrics.ServeHTTP, true},
	}
	r.applyFace()
	return r
}

// Name returns the replica's name.
func (r *Replica) Name() string { return r.name }

// ReadyAt is the model time at which the replica finishes "loading its
// model" (its Host's ModelNow when it was added, plus its load delay).
func (r *Replica) ReadyAt() time.Duration { return r.readyAt }

// Ready reports whether the replica has finished "loading its model".
func (r *Replica) Ready() bool { return r.h.ModelNow() >= r.readyAt }

// ServeHTTP serves the engine's endpoints. The order of the checks is
// llama.cpp's (tools/server/server-http.cpp): CORS preflight, then the
// loading state, then the API key, then the route.
func (r *Replica) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	if r.h.api == APILlamaCpp {
		h := w.Header()
		h.Set("Access-Control-Allow-Origin", req.Header.Get("Origin"))
		if req.Method == http.MethodOptions {
			h.Set("Access-Control-Allow-Credentials", "true")
			h.Set("Access-Control-Allow-Methods", "GET, POST")
			h.Set("Access-Control-Allow-Headers", "*")
			h.Set("Content-Type", "text/html")
			w.WriteHeader(http.StatusOK)
			return
		}
	}
	rt, ok := r.routes[req.URL.Path]
	switch {
	case !(ok && rt.duringLoad) && !r.Ready():
		writeError(w, http.StatusServiceUnavailable, wire.ErrTypeUnavailable, "Loading model")
	case !r.authorized(req):
		writeError(w, http.StatusUnauthorized, wire.ErrTypeAuthentication, "Invalid API Key")
	case !ok:
		writeError(w, http.StatusNotFound, wire.ErrTypeNotFound, "File Not Found")
	case req.Method != rt.method && !(rt.method == http.MethodGet && req.Method == http.MethodHead):
		w.Header().Set("Allow", rt.method)
		writeError(w, http.StatusMethodNotAllowed, wire.ErrTypeInvalidRequest,
			fmt.Sprintf("method %s not allowed on %s (use %s)", req.Method, req.URL.Path, rt.method))
	default:
		rt.serve(w, req)
	}
}

func (r *Replica) health(w http.ResponseWriter, _ *http.Request) {
	if !r.Ready() {
		writeError(w, http.StatusServiceUnavailable, wire.ErrTypeUnavailable, "Loading model")
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

// systemFingerprint is reported where llama.cpp reports its build.
const systemFingerprint = "llm-ring-sim"

func finishReason(res *model.Result) string {
	if res.Stop == model.StopEOS {
		return wire.FinishStop
	}
	return wire.FinishLength
}

func timingsOf(res *model.Result) *wire.Timings {
	t := res.Timings()
	return &t
}

// seedOf maps a request seed to the model's (0 and negative values, like
// llama.cpp's -1 "random", mean the replica's seed).
// start submits mreq to the model; the first of limits that is set is its
// n_predict (none: no limit). On failure it answers the error and returns
// ok false.
func (r *Replica) start(w http.ResponseWriter, mreq model.Request, limits ...*int) (model.ID, *waiter, bool) {
	mreq.NPredict = -1
	for _, n := range limits {
		if n != nil {
			mreq.NPredict = *n
			break
		}
	}
	wt := newWaiter()
	id, _, err := r.h.submit(r.index, mreq, wt)
	if err != nil {
		writeModelError(w, err)
		return 0, nil, false
	}
	return id, wt, true
}

// modelName is the model name an answer reports: the request's, else the
// first of Options.Models, else the alias.
func (r *Replica) modelName(requested string) string {
	switch {
	case requested != "":
		return requested
	case len(r.h.served.models) > 0:
		return r.h.served.models[0]
	}
	return r.h.alias
}

func seedOf(s *int64) uint64 {
	if s == nil || *s <= 0 {
		return 0
	}
	return uint64(*s)
}

// await waits for the request's events, calling onToken for each token
// (streaming), and returns its result.
func (r *Replica) await(ctx context.Context, id model.ID, w *waiter, onToken func(model.Event) error) (*model.Result, error) {
	var buf []model.Event
	for {
		select {
		case <-w.notify:
		case <-ctx.Done():
			r.h.abandon(r.index, id)
			return nil, ctx.Err()
		}
		var closed bool
		buf, closed = w.take(buf[:0])
		for _, ev := range buf {
			switch ev.Kind {
			case model.EventDone:
				return ev.Result, nil
			case model.EventFirstToken, model.EventToken:
				if onToken == nil {
					continue
				}
				if err := onToken(ev); err != nil {
					r.h.abandon(r.index, id)
					return nil, err
				}
			}
		}
		if closed {
			return nil, ErrClosed
		}
	}
}

func (r *Replica) awaitFailed(w http.ResponseWriter, err error) {
	if errors.Is(err, ErrClosed) {
		writeError(w, http.StatusServiceUnavailable, wire.ErrTypeUnavailable, "server is shutting down")
	}
	// Otherwise the client went away: there is no one to answer.
}

func (r *Replica) logResult(req *http.Request, res *model.Result) {
	r.h.log.Info("request",
		"replica", r.name, "path", req.URL.Path, "id", res.ID, "slot", res.Slot,
		"cache_n", res.CacheN, "prompt_n", res.PromptN, "predicted_n", res.PredictedN,
		"prompt_ms", ms(res.PromptTime()), "predicted_ms", ms(res.PredictedTime()),
		"queued_ms", ms(res.Started-res.Submitted))
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// tokenize serves POST /tokenize: {"content": "...", "with_pieces": bool}.
func (r *Replica) tokenize(w http.ResponseWriter, req *http.Request) {
	var body struct {
		Content    string `json:"content"`
		AddSpecial bool   `json:"add_special"`
		WithPieces bool   `json:"with_pieces"`
	}
	if !decode(w, req, &body) {
		return
	}
	toks, ends := model.AppendPieces(nil, nil, body.Content)
	r.h.vocab.learn(toks, body.Content, ends)
	if !body.WithPieces {
		writeJSON(w, http.StatusOK, map[string][]int{"tokens": tokenIDs(toks)})
		return
	}
	type piece struct {
		ID    int    `json:"id"`
		Piece string `json:"piece"`
	}
	out := make([]piece, len(toks))
	start := int32(0)
	for i, t := range toks {
		out[i] = piece{ID: int(t), Piece: body.Content[start:ends[i]]}
		start = ends[i]
	}
	writeJSON(w, http.StatusOK, map[string][]piece{"tokens": out})
}

// slotJSON is one entry of GET /slots, in llama.cpp's shape (the subset
// that means something here), plus n_past: the tokens in the slot's cache.
type slotJSON struct {
	ID           int       `json:"id"`
	IDTask       int64     `json:"id_task"`
	NCtx         int       `json:"n_ctx"`
	Speculative  bool      `json:"speculative"`
	IsProcessing bool      `json:"is_processing"`
	NPast        int       `json:"n_past"`
	NextToken    nextToken `json:"next_token"`
}

type nextToken struct {
	HasNextToken bool   `json:"has_next_token"`
	HasNewLine   bool   `json:"has_new_line"`
	NRemain      int    `json:"n_remain"`
	NDecoded     int    `json:"n_decoded"`
	StoppingWord string `json:"stopping_word"`
}

func (r *Replica) slots(w http.ResponseWriter, _ *http.Request) {
	var infos []model.SlotInfo
	r.h.inspect(r.index, func(s *model.Server, _ time.Duration) { infos = s.Slots() })
	out := make([]slotJSON, len(infos))
	for i, si := range infos {
		task := int64(-1)
		if si.Processing {
			task = int64(si.Task)
		}
		out[i] = slotJSON{
			ID: si.ID, IDTask: task, NCtx: si.NCtx, IsProcessing: si.Processing, NPast: si.NPast,
			NextToken: nextToken{HasNextToken: si.Processing, NRemain: si.NRemain, NDecoded: si.NDecoded},
		}
	}
	writeJSON(w, http.StatusOK, out)
}

// chatTemplate describes the template the replica applies (ChatML, Qwen2.5).
const chatTemplate = "<|im_start|>{role}\n{content}<|im_end|>\n ... <|im_start|>assistant\n"

// decode reads a JSON request body into v. On failure it writes a 400 (or
// 413) naming the problem and returns false.
func decode(w http.ResponseWriter, req *http.Request, v any) bool {
	data, err := readBody(w, req)
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			writeError(w, http.StatusRequestEntityTooLarge, wire.ErrTypeInvalidRequest,
				fmt.Sprintf("request body is larger than %d bytes", tooBig.Limit))
			return false
		}
		writeError(w, http.StatusBadRequest, wire.ErrTypeInvalidRequest, "cannot read request body: "+err.Error())
		return false
	}
	if len(bytes.TrimSpace(data)) == 0 {
		writeError(w, http.StatusBadRequest, wire.ErrTypeInvalidRequest, "request body is empty: expected a JSON object")
		return false
	}
	if err := json.Unmarshal(data, v); err != nil {
		writeError(w, http.StatusBadRequest, wire.ErrTypeInvalidRequest, jsonErrorText(err))
		return false
	}
	return true
}

func readBody(w http.ResponseWriter, req *http.Request) ([]byte, error) {
	var b bytes.Buffer
	_, err := b.ReadFrom(http.MaxBytesReader(w, req.Body, maxBody))
	return b.Bytes(), err
}

// jsonErrorText turns a decoding error into a message naming the problem.
func jsonErrorText(err error) string {
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syn):
		return fmt.Sprintf("invalid JSON at byte %d: %v", syn.Offset, syn)
	case errors.As(err, &typ) && typ.Field == "":
		return fmt.Sprintf("request body: must be a JSON object, got %s", typ.Value)
	case errors.As(err, &typ):
		return fmt.Sprintf("%s: must be %s, got %s", jsonField(typ.Field), jsonKind(typ.Type.Kind().String()), typ.Value)
	case strings.Contains(err.Error(), "unexpected end of JSON input"):
		return "invalid JSON: unexpected end of input"
	default:
		return "invalid request: " + err.Error()
	}
}

// jsonField drops the Go names of embedded structs from a decoding error's
// field path ("ChatRequest.max_tokens" → "max_tokens").
func jsonField(f string) string {
	parts := strings.Split(f, ".")
	for len(parts) > 1 && parts[0] != "" && parts[0][0] >= 'A' && parts[0][0] <= 'Z' {
		parts = parts[1:]
	}
	return strings.Join(parts, ".")
}

func jsonKind(k string) string {
	switch k {
	case "int", "int64", "int32", "uint64":
		return "an integer"
	case "float64":
		return "a number"
	case "bool":
		return "a boolean"
	case "string":
		return "a string"
	case "slice":
		return "an array"
	case "struct", "map":
		return "an object"
	}
	return "a " + k
}

// promptTokens reads /completion's prompt: a string, a token array, or a
// mixed array of strings and token ids (concatenated). Several strings
// (several prompts in one request) are not supported.
func promptTokens(raw json.RawMessage) ([]model.Token, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return nil, errors.New(`"prompt" is required`)
	}
	switch raw[0] {
	case '"':
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return nil, fmt.Errorf("prompt: %v", err)
		}
		return model.Tokenize(s), nil
	case '[':
		var items []json.RawMessage
		if err := json.Unmarshal(raw, &items); err != nil {
			return nil, fmt.Errorf("prompt: %v", err)
		}
		var toks []model.Token
		strs, ids := 0, 0
		for i, it := range items {
			it = bytes.TrimSpace(it)
			switch {
			case len(it) > 0 && it[0] == '"':
				var s string
				if err := json.Unmarshal(it, &s); err != nil {
					return nil, fmt.Errorf("prompt[%d]: %v", i, err)
				}
				toks = model.AppendTokens(toks, s)
				strs++
			default:
				var id int32
				if err := json.Unmarshal(it, &id); err != nil {
					return nil, fmt.Errorf("prompt[%d]: must be a string or a token id (an integer)", i)
				}
				toks = append(toks, model.Token(id))
				ids++
			}
		}
		if strs > 1 && ids == 0 {
			return nil, errors.New("prompt: several prompts in one request are not supported; send one string")
		}
		return toks, nil
	default:
		return nil, errors.New("prompt: must be a string or an array of token ids")
	}
}

// writeModelError maps a model.Submit error to llama.cpp's answer.
func writeModelError(w http.ResponseWriter, err error) {
	var ce *model.ContextError
	var te *model.TokenError
	switch {
	case errors.As(err, &ce):
		// llama.cpp adds the two numbers to the error object.
		writeJSON(w, http.StatusBadRequest, struct {
			Error contextErrorDetail `json:"error"`
		}{contextErrorDetail{
			ErrorDetail:   wire.ErrorDetail{Code: http.StatusBadRequest, Message: ce.Error(), Type: wire.ErrTypeExceedsContext},
			NPromptTokens: ce.NPromptTokens,
			NCtx:          ce.NCtx,
		}})
	case errors.As(err, &te), errors.Is(err, model.ErrEmptyPrompt):
		writeError(w, http.StatusBadRequest, wire.ErrTypeInvalidRequest, err.Error())
	case errors.Is(err, ErrClosed):
		writeError(w, http.StatusServiceUnavailable, wire.ErrTypeUnavailable, "server is shutting down")
	default:
		writeError(w, http.StatusInternalServerError, wire.ErrTypeServer, err.Error())
	}
}

type contextErrorDetail struct {
	wire.ErrorDetail
	NPromptTokens int `json:"n_prompt_tokens"`
	NCtx          int `json:"n_ctx"`
}

func writeError(w http.ResponseWriter, status int, typ, msg string) {
	writeJSON(w, status, wire.NewError(status, typ, msg))
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	data, err := json.Marshal(v)
	if err != nil {
		status = http.StatusInternalServerError
		data, _ = json.Marshal(wire.NewError(status, wire.ErrTypeServer, err.Error()))
	}
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(status)
	_, _ = w.Write(append(data, '\n'))
}

// sseWriter writes server-sent events: "data: <json>\n\n", flushed at once.
type sseWriter struct {
	w  http.ResponseWriter
	rc *http.ResponseController
}

func startSSE(w http.ResponseWriter) *sseWriter {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("Connection", "keep-alive")
	w.WriteHeader(http.StatusOK)
	s := &sseWriter{w: w, rc: http.NewResponseController(w)}
	_ = s.rc.Flush()
	return s
}

func (s *sseWriter) send(v any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return s.raw(data)
}

func (s *sseWriter) raw(data []byte) error {
	buf := make([]byte, 0, len(wire.SSEPrefix)+len(data)+2)
	buf = append(buf, wire.SSEPrefix...)
	buf = append(buf, data...)
	buf = append(buf, '\n', '\n')
	if _, err := s.w.Write(buf); err != nil {
		return err
	}
	return s.rc.Flush()
}

// done ends an OpenAI-compatible stream.
func (s *sseWriter) done() { _ = s.raw([]byte(wire.DataDone)) }
