package experiment

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/llm-ring/llm-ring/internal/record"
	"github.com/llm-ring/llm-ring/internal/ring"
	"github.com/llm-ring/llm-ring/internal/router"
	"github.com/llm-ring/llm-ring/internal/traffic"
	"github.com/llm-ring/llm-ring/internal/wire"
)

// errInterruptedRequest is the error text of a request cut short by Ctrl-C.
const errInterruptedRequest = "interrupted: the run was stopped before the answer ended"

// driver replays one run's conversations against a router.
type driver struct {
	urls    []string // router instances' base URLs, without a trailing slash
	client  *http.Client
	profile traffic.Profile
	convs   []traffic.Conversation
	speed   float64
	headers bool
	model   string                 // the requests' "model" field
	trace   []traffic.TraceRequest // if set, replayed open loop instead of convs
	names   []string               // with trace: each request's conversation name (nil: trace-l<line>)
	speedup float64                // divides the trace's timestamps
	start   time.Time              // the run's start (wall)
	base    record.Request
	onRow   func(*record.Request)

	mu   sync.Mutex
	rows []record.Request

	done, errors, cut atomic.Int64
}

// urlFor returns the router instance that receives turn (1-based) of
// conversation: URL[(hash(conversation) + turn) mod N], so that a
// conversation's successive turns go to successive instances, as behind a
// load balancer without affinity (issue #13: active-active routers).
func (d *driver) urlFor(conversation string, turn int) string {
	n := uint64(len(d.urls))
	if n == 1 {
		return d.urls[0]
	}
	return d.urls[(ring.HashString(conversation)+uint64(turn-1))%n]
}

// modelMS converts a wall duration into model milliseconds.
func (d *driver) modelMS(wall time.Duration) float64 {
	return float64(wall) / float64(time.Millisecond) * d.speed
}

// wall converts model seconds into a wall duration.
func (d *driver) wall(modelS float64) time.Duration {
	return time.Duration(modelS / d.speed * float64(time.Second))
}

// run starts one goroutine per user and waits for all of them. It returns
// when every conversation is done or ctx is cancelled.
func (d *driver) run(ctx context.Context) {
	if d.trace != nil {
		d.runTrace(ctx)
		return
	}
	var wg sync.WaitGroup
	for u := range d.profile.Concurrency {
		wg.Go(func() { d.user(ctx, u) })
	}
	wg.Wait()
}

// runTrace sends every trace request at its timestamp (divided by the
// speed-up, in model time), open loop: whatever happened to the earlier
// ones. Each is one user message of its synthesized text, with no
// conversation header, and max_tokens = output_length.
func (d *driver) runTrace(ctx context.Context) {
	var wg sync.WaitGroup
	for i := range d.trace {
		req := &d.trace[i]
		if !sleep(ctx, time.Until(d.start.Add(d.wall(float64(req.TimestampMS)/1000/d.speedup)))) {
			break
		}
		wg.Go(func() {
			row := d.base
			row.Conversation, row.Turn = fmt.Sprintf("trace-l%d", req.Line), 1
			if d.names != nil {
				row.Conversation = d.names[i]
			}
			row, _, _ = d.post(ctx, row, traffic.TraceMessages(traffic.TraceText(req)), req.OutputLength, nil)
			d.record(&row)
		})
	}
	wg.Wait()
}

// user runs conversations u, u+C, u+2C, … one after another.
func (d *driver) user(ctx context.Context, u int) {
	for i := u; i < len(d.convs); i += d.profile.Concurrency {
		if !d.conversation(ctx, &d.convs[i]) {
			return
		}
	}
}

// conversation runs c turn by turn; it returns false when ctx was cancelled.
func (d *driver) conversation(ctx context.Context, c *traffic.Conversation) bool {
	answers := make([]string, 0, len(c.Turns))
	prevTotal := 0
	for t := range c.Turns {
		if !traffic.Fits(d.profile, c, t, prevTotal) {
			d.cut.Add(1) // the remaining turns are skipped: the context is full
			return true
		}
		if !sleep(ctx, d.wall(c.Turns[t].ThinkS)) {
			return false
		}
		// Bursty profiles: a turn due while arrivals are off waits for the
		// next "on" period.
		if w := d.profile.ArrivalWait(d.modelMS(time.Since(d.start)) / 1000); w > 0 && !sleep(ctx, d.wall(w)) {
			return false
		}
		row, answer, total := d.send(ctx, c, t, answers)
		d.record(&row)
		if row.Error != "" || row.Status != http.StatusOK {
			// The next turn must resend this answer, which is missing: the
			// conversation ends here (the error is in the row).
			return ctx.Err() == nil
		}
		answers = append(answers, answer)
		prevTotal = total
	}
	return true
}

func sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

func (d *driver) record(r *record.Request) {
	if r.Error != "" || r.Status != http.StatusOK {
		d.errors.Add(1)
	}
	d.mu.Lock()
	d.rows = append(d.rows, *r)
	d.mu.Unlock()
	d.done.Add(1)
	if d.onRow != nil {
		d.onRow(r)
	}
}

// send sends turn t of c and reads the streamed answer. It returns the
// request's row, the answer text and the turn's total size as the replica
// counted it (prompt + answer tokens).
func (d *driver) send(ctx context.Context, c *traffic.Conversation, t int, answers []string) (record.Request, string, int) {
	row := d.base
	row.Conversation, row.Turn = c.ID, t+1
	var hdr func(http.Header)
	if d.headers {
		hdr = func(h http.Header) { traffic.SetHeaders(h, c, t) }
	}
	return d.post(ctx, row, traffic.Messages(c, t, answers), c.Turns[t].MaxTokens, hdr)
}

// post sends one chat request (streamed) and reads its answer into row;
// hdr, if set, adds headers.
func (d *driver) post(ctx context.Context, row record.Request, msgs []wire.ChatMessage, maxTokens int, hdr func(http.Header)) (record.Request, string, int) {
	body, err := traffic.ChatBody(d.model, msgs, maxTokens, true)
	if err != nil {
		row.Error = "encode request: " + err.Error()
		return row, "", 0
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, d.urlFor(row.Conversation, row.Turn)+wire.PathChatCompletions, bytes.NewReader(body))
	if err != nil {
		row.Error = "build request: " + err.Error()
		return row, "", 0
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "text/event-stream")
	if hdr != nil {
		hdr(req.Header)
	}
	sent := time.Now()
	row.StartMS = d.modelMS(sent.Sub(d.start))
	finish := func() {
		end := time.Now()
		row.EndMS = d.modelMS(end.Sub(d.start))
		row.LatencyMS = d.modelMS(end.Sub(sent))
	}
	resp, err := d.client.Do(req)
	if err != nil {
		finish()
		row.Error = requestError(ctx, err)
		return row, "", 0
	}
	defer resp.Body.Close()
	row.Status = resp.StatusCode
	// The router's headers: the replica, its reason, its prompt estimate
	// (without it, est_prompt_tokens is recorded as 0).
	row.Replica = resp.Header.Get(router.HeaderRoutedTo)
	row.Reason = resp.Header.Get(router.HeaderRouteReason)
	if v := resp.Header.Get(router.HeaderEstPrompt); v != "" {
		row.EstPrompt, _ = strconv.Atoi(v)
	}
	if resp.StatusCode != http.StatusOK {
		b, rerr := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		finish()
		row.Error = statusError(resp.StatusCode, b)
		if rerr != nil && ctx.Err() != nil {
			row.Error = errInterruptedRequest
		}
		return row, "", 0
	}
	var a answer
	if mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type")); mt == "text/event-stream" {
		err = a.readStream(resp.Body, func() { row.TTFTMS = d.modelMS(time.Since(sent)) })
	} else {
		err = a.readJSON(resp.Body)
	}
	finish()
	if err != nil {
		row.Error = requestError(ctx, err)
		return row, "", 0
	}
	row.CacheN, row.PromptN, row.PredictedN = a.cacheN, a.promptN, a.predictedN
	if row.TTFTMS == 0 && a.streamed {
		row.TTFTMS = row.LatencyMS // no content at all: the first token is the end
	}
	return row, a.text.String(), a.cacheN + a.promptN + a.predictedN
}

// requestError is the recorded text of a failed request.
func requestError(ctx context.Context, err error) string {
	if ctx.Err() != nil {
		return errInterruptedRequest
	}
	return err.Error()
}

// statusError describes a non-200 answer from its JSON error body, or else
// from the start of the body.
func statusError(status int, body []byte) string {
	var eb wire.ErrorBody
	if json.Unmarshal(body, &eb) == nil && eb.Error.Message != "" {
		return fmt.Sprintf("HTTP %d: %s", status, eb.Error.Message)
	}
	text := strings.TrimSpace(string(body))
	if len(text) > 200 {
		text = text[:200] + "…"
	}
	if text == "" {
		return fmt.Sprintf("HTTP %d", status)
	}
	return fmt.Sprintf("HTTP %d: %s", status, text)
}

// answer accumulates a chat answer: its text and the replica's counts.
type answer struct {
	text                        strings.Builder
	counted                     bool
	cacheN, promptN, predictedN int
	streamed                    bool
}

// chunk is the part of a chat answer or streamed chunk the runner reads; an
// error event carries Error instead.
type chunk struct {
	Choices []wire.ChatChoice `json:"choices"`
	Usage   *wire.Usage       `json:"usage"`
	Timings *wire.Timings     `json:"timings"`
	Error   *wire.ErrorDetail `json:"error"`
}

// count takes the counts of c: llama.cpp's timings, else OpenAI's usage.
func (a *answer) count(c *chunk) {
	switch {
	case c.Timings != nil:
		a.cacheN, a.promptN, a.predictedN = c.Timings.CacheN, c.Timings.PromptN, c.Timings.PredictedN
		a.counted = true
	case c.Usage != nil && !a.counted:
		cached := 0
		if c.Usage.PromptTokensDetails != nil {
			cached = c.Usage.PromptTokensDetails.CachedTokens
		}
		a.cacheN, a.promptN, a.predictedN = cached, max(0, c.Usage.PromptTokens-cached), c.Usage.CompletionTokens
		a.counted = true
	}
}

// readStream reads an SSE chat stream: the deltas' text, the counts of the
// last chunk, until "data: [DONE]". first is called at the first content.
func (a *answer) readStream(body io.Reader, first func()) error {
	a.streamed = true
	br := bufio.NewReaderSize(body, 32<<10)
	gotFirst := false
	for {
		line, err := br.ReadBytes('\n')
		if len(line) > 0 {
			data, ok := bytes.CutPrefix(bytes.TrimRight(line, "\r\n"), []byte("data:"))
			if ok {
				data = bytes.TrimSpace(data)
				if string(data) == wire.DataDone {
					return a.complete()
				}
				var c chunk
				if jerr := json.Unmarshal(data, &c); jerr != nil {
					return fmt.Errorf("malformed stream chunk: %v", jerr)
				}
				if c.Error != nil {
					return fmt.Errorf("error in stream: %s", c.Error.Message)
				}
				for _, ch := range c.Choices {
					if ch.Delta != nil && ch.Delta.Content != nil && *ch.Delta.Content != "" {
						if !gotFirst {
							gotFirst = true
							first()
						}
						a.text.WriteString(*ch.Delta.Content)
					}
				}
				a.count(&c)
			}
		}
		if err == io.EOF {
			if a.counted {
				return nil // counts arrived; only the [DONE] marker is missing
			}
			return errors.New("stream ended before the answer was complete")
		}
		if err != nil {
			return err
		}
	}
}

// readJSON reads a non-streamed chat answer.
func (a *answer) readJSON(body io.Reader) error {
	var c chunk
	if err := json.NewDecoder(io.LimitReader(body, 64<<20)).Decode(&c); err != nil {
		return fmt.Errorf("malformed answer: %v", err)
	}
	if c.Error != nil {
		return fmt.Errorf("error answer: %s", c.Error.Message)
	}
	if len(c.Choices) == 0 || c.Choices[0].Message == nil {
		return errors.New("answer without a message")
	}
	text, err := wire.ContentText(c.Choices[0].Message.Content)
	if err != nil {
		return fmt.Errorf("answer message: %v", err)
	}
	a.text.WriteString(text)
	a.count(&c)
	return a.complete()
}

func (a *answer) complete() error {
	if !a.counted {
		return errors.New("answer without token counts (no timings or usage)")
	}
	return nil
}
