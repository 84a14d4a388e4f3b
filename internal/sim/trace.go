package sim

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/llm-ring/llm-ring/internal/model"

	"github.com/llm-ring/llm-ring/internal/traffic"
)

// TraceRun returns the profile and the conversation source that replay a
// trace (the Mooncake format, traffic.ParseTrace) open loop: request i is a
// conversation of one turn — no system prompt, its synthesised text
// (traffic.TraceText: equal block ids give equal text), max_tokens its
// output length — sent at its timestamp divided by speedup, whatever the
// others are doing, with no conversation header (the router must find the
// reuse from the prompt alone). In the simulator's closed loop this is one
// user per request, whose only think time is its timestamp.
//
// The source returned makes a new Source for each run: a run's source
// caches block texts, and runs are simulated in parallel.
func TraceRun(name string, reqs []traffic.TraceRequest, speedup float64) (traffic.Profile, func() Source, error) {
	if len(reqs) == 0 {
		return traffic.Profile{}, nil, fmt.Errorf("trace %s: no request", name)
	}
	if !(speedup > 0) {
		return traffic.Profile{}, nil, fmt.Errorf("trace speedup: must be > 0, got %g", speedup)
	}
	maxOut, last := 1, 0.0
	for _, r := range reqs {
		maxOut = max(maxOut, r.OutputLength)
		last = max(last, float64(r.TimestampMS)/1000/speedup)
	}
	no := false
	p := traffic.Profile{
		Name: "trace:" + name, Description: fmt.Sprintf("%d requests replayed open loop from %s, speed-up %g", len(reqs), name, speedup),
		Conversations: len(reqs), Concurrency: len(reqs), TurnsMin: 1, TurnsMax: 1,
		UserWordsMin: 1, UserWordsMax: 1, ThinkSMin: 0, ThinkSMax: last,
		MaxTokens: maxOut, MaxContextTokens: 1 << 30, SystemPrompts: 1, ConversationHeader: &no,
	}
	if err := p.Validate(); err != nil {
		return traffic.Profile{}, nil, fmt.Errorf("trace %s: %w", name, err)
	}
	blocks := newTraceBlocks(reqs)
	return p, func() Source { return &traceSource{reqs: reqs, speedup: speedup, blocks: blocks} }, nil
}

// traceSource makes trace request i a one-turn conversation. Its block
// texts and their tokens are computed once for all the runs of the trace
// (traceBlocks, read-only once made), so the sources of runs simulated in
// parallel share them.
type traceSource struct {
	reqs    []traffic.TraceRequest
	names   []string         // conversation names (nil: trace-LINE)
	targets []traffic.Target // what each asks for (nil: no model named)
	speedup float64
	blocks  *traceBlocks
}

// Conversation implements Source.
func (t *traceSource) Conversation(i int) traffic.Conversation {
	r := &t.reqs[i]
	id := fmt.Sprintf("trace-%d", r.Line)
	if t.names != nil {
		id = t.names[i]
	}
	var tg traffic.Target
	if t.targets != nil {
		tg = t.targets[i]
	}
	return traffic.Conversation{
		ID: id, Model: tg.Model, Adapter: tg.Adapter,
		Turns: []traffic.Turn{{
			User:      t.blocks.text(r),
			MaxTokens: r.OutputLength,
			ThinkS:    (time.Duration(r.TimestampMS) * time.Millisecond).Seconds() / t.speedup,
		}},
	}
}

// AppendUserTokens implements userTokens: the tokens of conversation i's
// only user message, the blocks' tokens in order.
func (t *traceSource) AppendUserTokens(dst []model.Token, i, turn int) []model.Token {
	if turn != 0 {
		panic(fmt.Sprintf("sim: trace conversation %d has one turn, not %d", i, turn+1))
	}
	return t.blocks.appendTokens(dst, &t.reqs[i])
}

// userTokens is a Source that knows the tokens of its conversations' user
// messages (model.Tokenize of the turn's User text), so that the simulated
// client need not tokenize them again.
type userTokens interface {
	AppendUserTokens(dst []model.Token, conv, turn int) []model.Token
}

// traceBlocks is the text of every block a trace's requests use, and its
// tokens: the whole blocks, and the cut last blocks by their length. A
// request's text is its blocks' texts in order (traffic.TraceText); as
// every whole block ends with a newline, a token of its own, its tokens are
// its blocks' tokens in order (TestTraceTokensMatchText checks it).
type traceBlocks struct {
	whole map[int64]blockText
	cut   map[cutBlock]blockText
}

type cutBlock struct {
	id     int64
	tokens int
}

type blockText struct {
	text string
	toks []model.Token
}

func newTraceBlocks(reqs []traffic.TraceRequest) *traceBlocks {
	b := &traceBlocks{whole: map[int64]blockText{}, cut: map[cutBlock]blockText{}}
	texts := map[int64]string{}
	for i := range reqs {
		b.each(&reqs[i], func(id int64, left int) {
			one := traffic.TraceRequest{InputLength: min(left, traffic.TraceBlockTokens), HashIDs: []int64{id}}
			if left >= traffic.TraceBlockTokens {
				if _, ok := b.whole[id]; !ok {
					t := traffic.TraceTextCached(&one, texts)
					b.whole[id] = blockText{t, model.Tokenize(t)}
				}
				return
			}
			if k := (cutBlock{id, left}); b.cut[k].toks == nil {
				t := traffic.TraceTextCached(&one, texts)
				b.cut[k] = blockText{t, model.Tokenize(t)}
			}
		})
	}
	return b
}

// each calls f with each block of r that its text uses and the tokens left
// to it (the last one is cut when fewer than a block's are left), as
// traffic.TraceTextCached walks them.
func (b *traceBlocks) each(r *traffic.TraceRequest, f func(id int64, left int)) {
	left := r.InputLength
	for _, id := range r.HashIDs {
		if left <= 0 {
			break
		}
		f(id, left)
		left -= traffic.TraceBlockTokens
	}
}

func (b *traceBlocks) block(id int64, left int) *blockText {
	if left >= traffic.TraceBlockTokens {
		t := b.whole[id]
		return &t
	}
	t := b.cut[cutBlock{id, left}]
	return &t
}

// text is traffic.TraceText(r).
func (b *traceBlocks) text(r *traffic.TraceRequest) string {
	var sb strings.Builder
	n := 0
	b.each(r, func(id int64, left int) { n += len(b.block(id, left).text) })
	sb.Grow(n)
	b.each(r, func(id int64, left int) { sb.WriteString(b.block(id, left).text) })
	return sb.String()
}

// appendTokens appends model.Tokenize(b.text(r)).
func (b *traceBlocks) appendTokens(dst []model.Token, r *traffic.TraceRequest) []model.Token {
	dst = slices.Grow(dst, r.InputLength)
	b.each(r, func(id int64, left int) { dst = append(dst, b.block(id, left).toks...) })
	return dst
}
