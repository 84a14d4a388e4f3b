package router

import (
	"io"
	"net/http"
	"strings"

	"github.com/llm-ring/llm-ring/internal/convo"
	"github.com/llm-ring/llm-ring/internal/engine"
	"github.com/llm-ring/llm-ring/internal/prefix"
)

// This file is where the router speaks the engines' contracts (package
// engine): it asks every OpenAI-style stream for its usage and gives the
// client back the stream it asked for, and it reads the Anthropic Messages
// API's requests and answers.

// prepareStream makes a streamed chat or completions request ask the replica
// for usage (stream_options.include_usage) when the client did not: vLLM and
// SGLang, like OpenAI, report a stream's counts only then. The rewritten
// body is what the replica (and any failover) receives; the answer is
// filtered back to what the client asked for (wrapStream). The new body is
// a few bytes longer than the one the body budget holds: the budget keeps
// counting the old one's capacity, which covers it.
func (f *flight) prepareStream() error {
	if !f.p.stream || (f.kind != kindChat && f.kind != kindCompletions) {
		return nil
	}
	if f.p.streamOptsAbsent { // the fast parse read the whole body: no member to look for
		body, err := engine.AddStreamOptions(f.body)
		if err != nil {
			return badRequest("malformed JSON body: %v", err)
		}
		f.body, f.injected = body, true
		return nil
	}
	body, injected, err := engine.PrepareStream(f.body)
	if err != nil {
		return badRequest("malformed JSON body: %v", err)
	}
	f.body, f.injected = body, injected
	return nil
}

// wrapStream puts engine.Filter between a replica's successful SSE answer
// and the router's observer: the filter hands every count it sees to the
// observer and, when the router asked for usage itself, removes the
// usage-only chunk (and moves llama.cpp's timings back), so that the
// observer and the client both see exactly the stream the client would
// have received from the replica directly.
func (f *flight) wrapStream(resp *http.Response, body io.ReadCloser) io.ReadCloser {
	if resp.StatusCode/100 != 2 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		return body
	}
	switch f.kind {
	case kindChat, kindCompletions, kindCompletion, kindMessages:
	default:
		return body
	}
	if f.injected {
		// The usage chunk the router asked for is taken out again: an answer
		// the replica sent with a Content-Length reaches the client shorter,
		// so it goes chunked (else the client reads a truncated answer and
		// the server closes its connection).
		resp.Header.Del("Content-Length")
		resp.ContentLength = -1
	}
	if f.kind == kindMessages { // message_start and message_delta joined: package engine's reading
		return engine.NewFilter(body, f.injected, func(u engine.Usage) {
			if f.obs != nil {
				f.obs.learn(usageCounts(u))
			}
		})
	}
	f.filter.Reset(body, f.injected, &f.observer) // the router's counts parser, no closure
	return &f.filter
}

// Count reads the counts of one event of an OpenAI-style or llama.cpp
// stream for engine.Filter, which hands it every event that mentions them
// before the usage chunk the router asked for is taken out: the router's
// own parser (counts.go), as for the events the observer sees, llama.cpp's
// timings (and their milliseconds) winning over usage. A usage without
// prompt_tokens (not OpenAI's shape) is package engine's to read.
func (o *observer) Count(data []byte) {
	var a answerFields
	if parseAnswer(data, &a) != nil {
		return
	}
	c, ok := a.counts()
	if !ok {
		return
	}
	if !a.timings && a.promptTokens == 0 {
		u, err := engine.UsageOf(data)
		if err != nil {
			return
		}
		c = usageCounts(u)
	}
	o.learn(c)
}

// usageCounts converts what package engine read into the observer's counts.
// An engine that does not report cached tokens (vLLM without
// --enable-prompt-tokens-details, SGLang without --enable-cache-report)
// gives Cached 0 with CachedKnown false: the counts stand, but the state
// does not read "nothing reused" as a lost cache.
func usageCounts(u engine.Usage) counts {
	return counts{known: true, cacheN: u.Cached, promptN: max(0, u.Prompt-u.Cached), predictedN: u.Completion,
		cachedUnknown: !u.CachedKnown}
}

// messagesCounts reads the counts of an Anthropic Messages answer
// (non-streamed: the message's usage). Streams are read by engine.Filter,
// which joins message_start's input counts with message_delta's output.
func messagesCounts(data []byte, sse bool) (counts, bool) {
	if sse {
		return counts{}, false
	}
	u, err := engine.UsageOf(data)
	if err != nil {
		return counts{}, false
	}
	return usageCounts(u), true
}

// parseAnthropic reads an Anthropic Messages request (POST /v1/messages)
// into the conversation accumulator: the system prompt as a system
// message, then the messages, so that the same conversation gets the same
// key, blocks and turn through either API.
func (p *parsed) parseAnthropic(body []byte, prefixChars int, hs *prefix.Hasher) (string, error) {
	m, err := engine.ParseMessages(body)
	if err != nil {
		return "", badRequest("%v", err)
	}
	var acc convo.Accumulator
	acc.Reset(prefixChars, hs)
	if m.System != "" {
		acc.Add("system", m.System)
	}
	for _, msg := range m.Messages {
		acc.Add(msg.Role, msg.Text)
	}
	return p.accumulated(acc.Routing()), nil
}
