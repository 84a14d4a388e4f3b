package engine

import (
	"bytes"
	"encoding/json"
	"io"
	"slices"
	"sync"
)

// Filter wraps a replica's SSE body (an OpenAI-compatible stream, or
// llama.cpp's /completion stream, or an Anthropic Messages stream). It passes
// the stream through, hands every count it sees to OnUsage, and, when strip
// is set (the router injected stream_options.include_usage, see
// PrepareStream), removes what the client did not ask for:
//
//   - the usage-only last chunk ("choices": [] with "usage"), which the
//     engines (llama.cpp, vLLM, SGLang, like OpenAI) add only with the option;
//   - llama.cpp puts its "timings" on the last chunk: with the option that
//     is the usage chunk, without it the finish chunk. The filter appends the
//     removed chunk's timings to the finish chunk, as llama.cpp writes it.
//
// Usage fields on other chunks are left alone: no engine adds them because
// of include_usage alone (vLLM's per-chunk usage needs
// continuous_usage_stats, which the router never sets; llama.cpp's
// /v1/completions finish chunk has usage either way).
//
// Events pass through as soon as their blank line arrives, except a chunk
// with a finish reason, which waits for the next event (the usage chunk, if
// any, follows it at once). The filter works for any split of the body into
// reads. It is not safe for concurrent use, like the body it wraps.
type Filter struct {
	rc      io.ReadCloser
	strip   bool
	onUsage func(Usage)
	counter Counter // reads the counts itself instead of UsageOf (NewFilterTo)

	in   []byte  // bytes read, not yet a whole event (in *pool, or grown out of it)
	pool *[]byte // the buffer from readBuffers, returned on Close
	out  []byte  // bytes ready for the caller
	held []byte  // a finish chunk waiting for the next event
	err  error   // the body's error, returned once out is empty

	prompt int // Anthropic: message_start's prompt, for message_delta
	cached int
	known  bool
}

// NewFilter returns a Filter over rc. onUsage may be nil.
func NewFilter(rc io.ReadCloser, strip bool, onUsage func(Usage)) *Filter {
	return &Filter{rc: rc, strip: strip, onUsage: onUsage}
}

// A Counter reads the counts of a stream's events itself (NewFilterTo):
// Count gets the data of every event that mentions "usage" or "timings",
// before the filter removes anything, in the stream's order. The data is
// valid only during the call.
type Counter interface {
	Count(data []byte)
}

// Reset makes f a Filter over rc whose events' counts go to c instead of
// UsageOf (for a caller with its own parser of the OpenAI and llama.cpp
// shapes; an Anthropic stream's message_start/message_delta joining is
// NewFilter's). It lets a Filter be held in a caller's own struct.
func (f *Filter) Reset(rc io.ReadCloser, strip bool, c Counter) {
	*f = Filter{rc: rc, strip: strip, counter: c}
}

// readBuffers hold the bytes of streams being filtered: one per stream,
// back on Close.
var readBuffers = sync.Pool{New: func() any { b := make([]byte, 0, readSize); return &b }}

const readSize = 4 << 10

var (
	dataPrefix     = []byte("data:")
	finishNonNull  = []byte(`"finish_reason":"`)
	usageKey       = []byte(`"usage"`)
	timingsKey     = []byte(`"timings"`)
	emptyChoices   = []byte(`"choices":[]`)
	messageStartTy = []byte(`"message_start"`)
)

// Read implements io.Reader.
func (f *Filter) Read(p []byte) (int, error) {
	for len(f.out) == 0 && f.err == nil {
		if f.pool == nil {
			f.pool = readBuffers.Get().(*[]byte)
			f.in = (*f.pool)[:0]
		}
		if cap(f.in)-len(f.in) < readSize/2 {
			f.in = slices.Grow(f.in, readSize)
		}
		// Straight into the free end of f.in: no second copy.
		n, err := f.rc.Read(f.in[len(f.in):cap(f.in)])
		if n > 0 {
			f.in = f.in[:len(f.in)+n]
			f.events()
		}
		if err != nil {
			// The stream ended: whatever is left goes out as it is.
			f.out = append(f.out, f.held...)
			f.out = append(f.out, f.in...)
			f.held, f.in = nil, f.in[:0]
			f.err = err
		}
	}
	n := copy(p, f.out)
	f.out = f.out[n:]
	if len(f.out) == 0 {
		f.out = nil
		return n, f.err
	}
	return n, nil
}

// Close closes the wrapped body and gives the filter's buffer back.
func (f *Filter) Close() error {
	if f.pool != nil {
		readBuffers.Put(f.pool)
		f.pool, f.in = nil, nil
	}
	return f.rc.Close()
}

// events handles every whole event in f.in, then moves what is left (the
// start of the next event) to the front of the buffer.
func (f *Filter) events() {
	off := 0
	for {
		end := eventEnd(f.in[off:])
		if end < 0 {
			break
		}
		f.event(f.in[off : off+end])
		off += end
	}
	f.in = f.in[:copy(f.in, f.in[off:])]
}

// eventEnd returns the length of the first whole event in b (up to and
// including its blank line), or -1.
func eventEnd(b []byte) int {
	for i := 0; i < len(b); i++ {
		if b[i] != '\n' {
			continue
		}
		// A blank line: "\n\n" or "\n\r\n".
		if i+1 < len(b) && b[i+1] == '\n' {
			return i + 2
		}
		if i+2 < len(b) && b[i+1] == '\r' && b[i+2] == '\n' {
			return i + 3
		}
	}
	return -1
}

// eventData returns the data of an event's "data:" line (nil if none).
func eventData(ev []byte) []byte {
	for len(ev) > 0 {
		line := ev
		if i := bytes.IndexByte(ev, '\n'); i >= 0 {
			line, ev = ev[:i], ev[i+1:]
		} else {
			ev = nil
		}
		if d, ok := bytes.CutPrefix(bytes.TrimRight(line, "\r"), dataPrefix); ok {
			return bytes.TrimSpace(d)
		}
	}
	return nil
}

func (f *Filter) event(ev []byte) {
	data := eventData(ev)
	if bytes.Contains(data, usageKey) || bytes.Contains(data, timingsKey) {
		f.observe(data)
	}
	if f.strip && bytes.Contains(data, emptyChoices) && bytes.Contains(data, usageKey) && f.usageOnly(data) {
		if t, ok := timingsOf(data); ok && f.held != nil {
			f.held = appendMember(f.held, "timings", t)
		}
		f.flushHeld()
		return
	}
	f.flushHeld()
	if f.strip && bytes.Contains(data, finishNonNull) {
		f.held = append([]byte(nil), ev...) // ev is in the read buffer, which moves on
		return
	}
	f.out = append(f.out, ev...)
}

func (f *Filter) flushHeld() {
	if f.held != nil {
		f.out = append(f.out, f.held...)
		f.held = nil
	}
}

// observe hands the counts of one event's data to OnUsage.
func (f *Filter) observe(data []byte) {
	if f.counter != nil {
		f.counter.Count(data)
		return
	}
	u, err := UsageOf(data)
	if err != nil || f.onUsage == nil {
		return
	}
	// Anthropic: message_start has the prompt, message_delta the output.
	if bytes.Contains(data, messageStartTy) {
		f.prompt, f.cached, f.known = u.Prompt, u.Cached, u.CachedKnown
		return
	}
	if u.Prompt == 0 && f.prompt > 0 {
		u.Prompt, u.Cached, u.CachedKnown = f.prompt, f.cached, f.known
	}
	f.onUsage(u)
}

// usageOnly reports whether data is a chunk with no choices and a usage.
func (f *Filter) usageOnly(data []byte) bool {
	if only, ok := fastUsageOnly(data); ok {
		return only
	}
	var c struct {
		Choices []json.RawMessage `json:"choices"`
		Usage   json.RawMessage   `json:"usage"`
	}
	return json.Unmarshal(data, &c) == nil && c.Choices != nil && len(c.Choices) == 0 &&
		len(c.Usage) > 0 && !bytes.Equal(c.Usage, []byte("null"))
}

func timingsOf(data []byte) ([]byte, bool) {
	s, e, ok := memberSpan(data, "timings")
	if !ok {
		return nil, false
	}
	return data[s:e], true
}

// appendMember adds "key":val at the end of the JSON object in an event's
// data line (llama.cpp appends its timings last).
func appendMember(ev []byte, key string, val []byte) []byte {
	data := eventData(ev)
	if data == nil {
		return ev
	}
	start := bytes.Index(ev, data)
	close := start + len(data) - 1
	if close < start || ev[close] != '}' {
		return ev
	}
	out := make([]byte, 0, len(ev)+len(key)+len(val)+4)
	out = append(out, ev[:close]...)
	out = append(out, ',', '"')
	out = append(out, key...)
	out = append(out, '"', ':')
	out = append(out, val...)
	return append(out, ev[close:]...)
}

// fastUsageOnly is usageOnly's reading without decoding: the top-level
// "choices" and "usage" (keys matched as encoding/json matches ASCII keys,
// the last of each winning), for valid JSON. ok is false for a key with an
// escape or a non-ASCII byte (encoding/json's Unicode folding): then
// encoding/json reads it. TestFastUsageOnlyAgrees and FuzzUsageOnly hold it
// to the decoding.
func fastUsageOnly(data []byte) (only, ok bool) {
	if !json.Valid(data) {
		return false, true // Unmarshal fails: not a usage-only chunk
	}
	i := skipWS(data, 0)
	if data[i] != '{' {
		return false, true // null leaves the struct empty; other values fail
	}
	var choices, usage []byte
	for i = skipWS(data, i+1); i < len(data) && data[i] == '"'; {
		ks := i
		i = skipString(data, i)
		k := data[ks+1 : i-1]
		for _, c := range k {
			if c == '\\' || c >= 0x80 {
				return false, false
			}
		}
		vs := skipWS(data, skipWS(data, i)+1) // past the colon
		ve := skipValue(data, vs)
		switch v := data[vs:ve]; {
		case bytes.EqualFold(k, []byte("choices")):
			switch v[0] {
			case '[':
				choices = v
			case 'n':
				choices = nil
			default:
				return false, true // a type error: Unmarshal fails
			}
		case bytes.EqualFold(k, []byte("usage")):
			usage = v
		}
		if i = skipWS(data, ve); i < len(data) && data[i] == ',' {
			i = skipWS(data, i+1)
		}
	}
	empty := choices != nil && choices[skipWS(choices, 1)] == ']'
	return empty && usage != nil && !bytes.Equal(usage, []byte("null")), true
}
