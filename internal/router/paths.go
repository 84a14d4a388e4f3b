package router

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/cespare/xxhash/v2"

	"github.com/llm-ring/llm-ring/internal/engine"
	"github.com/llm-ring/llm-ring/internal/policy"
	"github.com/llm-ring/llm-ring/internal/prefix"
	"github.com/llm-ring/llm-ring/internal/ring"
	"github.com/llm-ring/llm-ring/internal/state"
	"github.com/llm-ring/llm-ring/internal/wire"
)

// The routed API. Conversations (completions, chat, Anthropic messages) are
// routed by the configured policy and teach the router their token counts;
// the rest (byLoadPaths) goes to the ready replica with the fewest requests
// in flight; the model list is answered by the router from the replicas'.
var (
	conversationPaths = []string{wire.PathCompletion, wire.PathChatCompletions, wire.PathCompletions, wire.PathMessages,
		pathOllamaChat, pathOllamaGenerate}
	byLoadPaths  = []string{wire.PathEmbeddings, wire.PathRerank, "/rerank", wire.PathTokenize, wire.PathDetokenize}
	proxiedPaths = append(slices.Clone(conversationPaths), byLoadPaths...)
	modelsPaths  = []string{wire.PathModels, "/models"}
	listPaths    = append(slices.Clone(modelsPaths), pathOllamaTags, pathOllamaPS, pathOllamaVersion)
)

// listSpec is one list the router answers from the replicas': the path it
// asks them, and how their answers merge.
type listSpec struct {
	upstream string
	merge    func(lists ...[]byte) ([]byte, error)
}

// lists maps each of listPaths to its spec.
var lists = map[string]listSpec{
	wire.PathModels:   {wire.PathModels, engine.MergeModels},
	"/models":         {wire.PathModels, engine.MergeModels},
	pathOllamaTags:    {pathOllamaTags, engine.MergeOllamaModels},
	pathOllamaPS:      {pathOllamaPS, engine.MergeOllamaModels},
	pathOllamaVersion: {pathOllamaVersion, engine.MergeOllamaVersion},
}

func isByLoad(path string) bool { return slices.Contains(byLoadPaths, path) }

// newFlight reads what routing needs of a request. A conversation is parsed
// (400s name the field); a request routed by load is not (the replica
// judges its body) and goes by policy.Least, its ring position (which only
// breaks ties) taken from its body.
func (r *Router) newFlight(ctx context.Context, kind apiKind, req *http.Request, body []byte, hs *prefix.Hasher) (*flight, error) {
	f := flightPool.Get().(*flight) // zero (recycle)
	f.ctx, f.kind, f.path, f.body = ctx, kind, req.URL.Path, body
	if kind == kindByLoad {
		f.pol = policy.Least{}
		f.p.keySource = "none"
		f.in = state.Input{Hash: xxhash.Sum64(body)}
		if err := r.resolve(f, bodyModel(body)); err != nil {
			return nil, err
		}
		return f, nil
	}
	p, err := parseRequest(kind, req.Header, body, &r.rules, hs)
	if err != nil {
		return nil, err
	}
	f.p = p
	f.in = state.Input{Key: p.key, Hash: ring.HashString(p.key), Chars: p.chars, Tokens: p.tokens, OutputTokens: p.maxTokens,
		Blocks: p.blocks, FirstUser: p.firstUser}
	if err := r.resolve(f, p.model); err != nil {
		return nil, err
	}
	if err := f.prepareStream(); err != nil {
		return nil, err
	}
	return f, nil
}

// route picks the flight's replica in its pool with its policy, skipping
// exclude.
func (r *Router) route(f *flight, now int64, exclude ...string) (state.Ticket, policy.Decision, error) {
	if f.pol != nil {
		return f.table().RouteWith(f.pol, f.in, now, exclude...)
	}
	return f.table().Route(f.in, now, exclude...)
}

// Model list: how long a merged answer is reused, and how long the router
// waits for the replicas' lists.
const (
	modelsTTL     = 3 * time.Second
	modelsTimeout = 2 * time.Second
)

// modelsCache is the last merged model list, for one set of credentials
// (the hash of the client's Authorization and X-Api-Key headers: a list
// fetched with one key is never shown to a client with another).
type modelsCache struct {
	spec listSpec
	mu   sync.Mutex
	cred [sha256.Size]byte
	at   time.Time
	body []byte
}

func (r *Router) handleModels() {
	caches := map[string]*modelsCache{}
	for _, p := range listPaths {
		spec := lists[p]
		c := caches[spec.upstream]
		if c == nil {
			c = &modelsCache{spec: spec}
			caches[spec.upstream] = c
		}
		r.mux.HandleFunc(p, func(w http.ResponseWriter, req *http.Request) {
			w.Header().Set("Allow", "GET, HEAD")
			r.fail(w, &httpError{http.StatusMethodNotAllowed, wire.ErrTypeInvalidRequest, p + " accepts GET only"})
		})
		r.mux.HandleFunc("GET "+p, func(w http.ResponseWriter, req *http.Request) { r.serveModels(w, req, c) })
	}
}

// serveModels answers GET /v1/models (and /models) with the union of the
// models the healthy replicas list (engine.MergeModels), Ollama's GET
// /api/tags and /api/ps with the union of theirs (engine.MergeOllamaModels)
// and GET /api/version with their lowest version; each is fetched at once
// with the client's credentials and a short timeout, and reused for
// modelsTTL. A replica that fails or answers something else is left out;
// when none answers, the client gets the first refusal (a 401 for a wrong
// key) or a 503.
func (r *Router) serveModels(w http.ResponseWriter, req *http.Request, c *modelsCache) {
	cred := sha256.Sum256([]byte(req.Header.Get("Authorization") + "\x00" + req.Header.Get("X-Api-Key")))
	now := time.Now()
	c.mu.Lock()
	if c.body != nil && c.cred == cred && now.Sub(c.at) < modelsTTL {
		body := c.body
		c.mu.Unlock()
		writeRaw(w, http.StatusOK, body)
		return
	}
	c.mu.Unlock()

	var urls []string
	for _, rep := range r.view().Replicas {
		if rep.Healthy {
			urls = append(urls, rep.URL)
		}
	}
	if len(urls) == 0 {
		r.fail(w, &httpError{http.StatusServiceUnavailable, wire.ErrTypeUnavailable, "no ready replica to list the models"})
		return
	}
	type answer struct {
		status int
		body   []byte
		err    error
	}
	got := make([]answer, len(urls))
	ctx, cancel := context.WithTimeout(req.Context(), modelsTimeout)
	defer cancel()
	var wg sync.WaitGroup
	for i, u := range urls {
		wg.Go(func() {
			got[i].status, got[i].body, got[i].err = r.fetchModels(ctx, u, c.spec.upstream, req.Header)
		})
	}
	wg.Wait()
	var lists [][]byte
	var refusal *answer
	for i := range got {
		a := &got[i]
		switch {
		case a.err != nil:
			r.log.Warn("models", slog.String("url", urls[i]), slog.String("error", clip(a.err.Error(), 256)))
		case a.status == http.StatusOK:
			lists = append(lists, a.body)
		case refusal == nil && a.status/100 == 4:
			refusal = a
		}
	}
	pooled := c.spec.upstream == wire.PathModels && len(r.pools.Models()) > 0
	if len(lists) == 0 && !pooled {
		if refusal != nil {
			writeRaw(w, refusal.status, refusal.body)
			return
		}
		r.fail(w, &httpError{http.StatusServiceUnavailable, wire.ErrTypeUnavailable, "no replica answered GET " + c.spec.upstream})
		return
	}
	merged, err := []byte(`{"object":"list","data":[]}`), error(nil)
	if len(lists) > 0 {
		merged, err = mergeModels(c.spec.merge, lists, r.log)
	}
	if err == nil && pooled {
		merged, err = r.poolModels(merged)
	}
	if err != nil {
		r.fail(w, &httpError{http.StatusBadGateway, wire.ErrTypeServer, err.Error()})
		return
	}
	c.mu.Lock()
	c.cred, c.at, c.body = cred, now, merged
	c.mu.Unlock()
	writeRaw(w, http.StatusOK, merged)
}

// mergeModels merges the lists that parse, leaving out (and logging) those
// that do not; an error only when none does.
func mergeModels(merge func(...[]byte) ([]byte, error), lists [][]byte, log *slog.Logger) ([]byte, error) {
	var ok [][]byte
	var last error
	for _, l := range lists {
		if _, err := merge(l); err != nil {
			log.Warn("models", slog.String("error", clip(err.Error(), 256)))
			last = err
			continue
		}
		ok = append(ok, l)
	}
	if len(ok) == 0 {
		return nil, fmt.Errorf("no replica answered a valid model list: %v", last)
	}
	return merge(ok...)
}

// fetchModels GETs one replica's model list with the client's credentials.
func (r *Router) fetchModels(ctx context.Context, base, path string, h http.Header) (int, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(base, "/")+path, nil)
	if err != nil {
		return 0, nil, err
	}
	for _, k := range []string{"Authorization", "X-Api-Key"} {
		if v := h.Get(k); v != "" {
			req.Header.Set(k, v)
		}
	}
	resp, err := r.base.RoundTrip(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if err != nil {
		return 0, nil, err
	}
	return resp.StatusCode, bytes.TrimSpace(body), nil
}

func writeRaw(w http.ResponseWriter, status int, body []byte) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write(body)
	w.Write([]byte("\n"))
}
