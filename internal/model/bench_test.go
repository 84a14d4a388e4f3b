package model

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// sink keeps results alive so the compiler cannot drop the work.
var sink int

// BenchmarkModel pushes multi-turn chat traffic through one replica: 50
// conversations, each turn resending the whole history (prompt, answer,
// a new user message of ~30 tokens), reset when the history passes 1,500
// tokens, so prompts average ~1,000 tokens. A request arrives every 2 s of
// model time; the replica keeps 1 to 4 requests in flight. One iteration
// is one request: submit, plus advancing the replica through its events.
//
//   - tokens=incremental: the caller keeps each conversation's tokens,
//     tokenizes only the new user message (AppendMessageTokens) and reuses
//     the answer's tokens (AppendAssistantTokens), as a simulator does;
//   - tokens=full: the caller tokenizes the whole rendered conversation
//     every turn (~4,000 characters).
func BenchmarkModel(b *testing.B) {
	for _, mode := range []string{"incremental", "full"} {
		b.Run("tokens="+mode, func(b *testing.B) {
			benchModel(b, DefaultConfig(), 50, 2*time.Second, mode == "full", nil)
		})
	}
}

// BenchmarkModelGPU is BenchmarkModel's incremental traffic on the GPU
// preset (256 sequences, a shared KV pool), busier: 300 conversations, a
// request every 20 ms of model time, so that tens of sequences decode at
// once.
func BenchmarkModelGPU(b *testing.B) {
	benchModel(b, GPUH100Llama8B(), 300, 20*time.Millisecond, false, nil)
}

// BenchmarkPagedAdapters is BenchmarkModelGPU's traffic on the paged
// vllm-h100-8b preset, every conversation on the base model (off), or on
// one of 20 LoRA adapters (conversation i on adapter i mod 20) with 4
// adapter slots: the cost of simulating adapters, and how many loads one
// replica serving them all pays.
func BenchmarkPagedAdapters(b *testing.B) {
	cfg, err := Preset(PresetH100Llama8B)
	if err != nil {
		b.Fatal(err)
	}
	b.Run("adapters=off", func(b *testing.B) { benchModel(b, cfg, 300, 20*time.Millisecond, false, nil) })
	names := make([]string, 20)
	for i := range names {
		names[i] = fmt.Sprintf("lora-%02d", i)
	}
	cfg.MaxLoras = 4
	b.Run("adapters=20,slots=4", func(b *testing.B) { benchModel(b, cfg, 300, 20*time.Millisecond, false, names) })
}

func benchModel(b *testing.B, cfg Config, convs int, every time.Duration, full bool, adapters []string) {
	type conv struct {
		msgs []Message
		toks []Token
		last ID
	}
	r, _ := New(cfg)
	cs := make([]conv, convs)
	users := make([]string, 64)
	for i := range users {
		users[i] = GenerateAnswer(uint64(i), 7, 30).Text
	}
	doc := GenerateAnswer(99, 99, 700).Text
	answers := map[ID]Output{}
	owner := map[ID]int{}
	var evs []Event
	now := time.Duration(0)
	promptTokens := 0
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		c := &cs[i%convs]
		if c.last != 0 {
			// The previous turn's answer joins the history.
			ans, ok := answers[c.last]
			if !ok {
				// Still running: drive the replica until it is done.
				for !ok {
					at, _ := r.NextEvent()
					now = max(now, at)
					evs = r.Advance(now, evs[:0])
					for _, e := range evs {
						if e.Kind == EventDone {
							answers[e.ID] = e.Result.Output
						}
					}
					ans, ok = answers[c.last]
				}
			}
			delete(answers, c.last)
			c.msgs = append(c.msgs, Message{Role: "assistant", Content: ans.Text})
			if full {
				c.toks = AppendMessageTokens(c.toks, c.msgs[len(c.msgs)-1])
			} else {
				c.toks = AppendAssistantTokens(c.toks, &ans)
			}
		}
		if len(c.toks) > 1500 || c.msgs == nil {
			c.msgs = c.msgs[:0]
			c.toks = AppendMessageTokens(c.toks[:0], Message{Role: "system", Content: DefaultSystemPrompt})
			m := Message{Role: "user", Content: "Summarize this document: " + doc[:200+(i*37)%2000]}
			c.msgs = append(c.msgs, m)
			c.toks = AppendMessageTokens(c.toks, m)
		} else {
			m := Message{Role: "user", Content: users[i%len(users)]}
			c.msgs = append(c.msgs, m)
			c.toks = AppendMessageTokens(c.toks, m)
		}
		var prompt []Token
		if full {
			prompt = Tokenize(RenderChat(c.msgs))
		} else {
			// The prompt shares c.toks's memory: the model reads it until
			// the request is done, and the conversation only grows after
			// that (appending the answer rewrites the same header tokens).
			n := len(c.toks)
			prompt = AppendGenerationPrompt(c.toks)
			c.toks = prompt[:n]
		}
		promptTokens += len(prompt)
		now += every
		for {
			at, ok := r.NextEvent()
			if !ok || at > now {
				break
			}
			evs = r.Advance(at, evs[:0])
			for _, e := range evs {
				if e.Kind == EventDone {
					answers[e.ID] = e.Result.Output
				}
			}
		}
		evs = r.Advance(now, evs[:0])
		for _, e := range evs {
			if e.Kind == EventDone {
				answers[e.ID] = e.Result.Output
			}
		}
		rq := Request{Tokens: prompt, NPredict: 64}
		if len(adapters) > 0 {
			rq.Adapter = adapters[(i%convs)%len(adapters)]
		}
		id, err := r.Submit(now, rq)
		if err != nil {
			b.Fatal(err)
		}
		c.last = id
		owner[id] = i % convs
		delete(owner, id)
	}
	b.StopTimer()
	st := r.Server().Stats()
	sink += int(st.Requests)
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "req/s")
	b.ReportMetric(float64(promptTokens)/float64(b.N), "prompt-tokens/req")
	if st.PromptTokens+st.CacheN > 0 {
		b.ReportMetric(float64(st.CacheN)/float64(st.PromptTokens+st.CacheN), "cache-hit")
	}
	if len(adapters) > 0 {
		b.ReportMetric(1000*float64(st.AdapterLoads)/float64(b.N), "loads/1k-req")
	}
}

// BenchmarkSubmitCold is the worst case per request: a fresh 1,000-token
// prompt each time (no prefix shared), tokenized from 4,000 characters.
func BenchmarkSubmitCold(b *testing.B) {
	r, _ := New(DefaultConfig())
	text := strings.Repeat(prose, 6)
	var evs []Event
	now := time.Duration(0)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		off := (i * 13) % 800
		prompt := Tokenize(text[off : off+4000])
		now += 20 * time.Second
		evs = r.Advance(now, evs[:0])
		if _, err := r.Submit(now, Request{Tokens: prompt, NPredict: 64}); err != nil {
			b.Fatal(err)
		}
		for {
			at, ok := r.NextEvent()
			if !ok || at > now+19*time.Second {
				break
			}
			evs = r.Advance(at, evs[:0])
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "req/s")
}
