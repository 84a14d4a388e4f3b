package traffic

import (
	"math/rand/v2"
	"strconv"
	"strings"

	"github.com/llm-ring/llm-ring/internal/model"
)

// The scenario keys (profile.go) draw from random streams of their own, so
// that a profile without them generates exactly what it did before they
// existed: the conversation streams (stream) are never drawn from more.
const (
	kindConversation = 1 // per conversation: hot or not, which shared document
	kindCatalogue    = 2 // the tool catalogue of system prompt i
	kindHot          = 3 // the hot prompt
	kindDocument     = 4 // shared document i
	kindTraceBlock   = 5 // the text of trace hash block id
)

// featureStream returns the random source of (seed, kind, n).
func featureStream(seed int64, kind, n uint64) *rand.Rand {
	a := splitmix(uint64(seed) ^ 0x7363656e6172696f ^ splitmix(kind)) // "scenario"
	return rand.New(rand.NewPCG(splitmix(a+n), splitmix(a^splitmix(n+0x632be59bd9b4e019))))
}

// longPromptChars bounds the length in bytes of a long prompt of at least
// tokens tokens: a persona of at most maxSystemChars, then a catalogue at
// about 3.3 bytes per token (measured: its names, JSON and punctuation make
// many short tokens), which appendCatalogue never lets pass this bound.
// Validate's context bound relies on it; a test checks that shipped
// profiles still reach their token targets within it.
func longPromptChars(tokens int) int { return 7*tokens/2 + maxSystemChars }

// toolFields name the fields of tool results in the catalogue.
var toolFields = [...]string{"status", "items", "total", "owner", "due_date", "notes", "priority", "updated_at",
	"region", "amount", "history", "tags"}

// appendCatalogue appends a tool catalogue to b until b holds at least
// target tokens (model.Count), and at most longPromptChars(target) bytes.
// Every entry starts with a newline, so the tokens of b are the sum of its
// parts' tokens.
func appendCatalogue(b []byte, r *rand.Rand, target int) []byte {
	const intro = "\n\nYou can call the tools listed below. To call one, answer with a single JSON object " +
		`{"tool": "<name>", "arguments": {...}} and nothing else; the result comes back as the next user message. ` +
		"Call at most one tool per answer, and never invent a tool that is not listed."
	b = append(b, intro...)
	n := model.Count(string(b))
	limit := longPromptChars(target)
	for k := 1; n < target; k++ {
		d := &domains[r.IntN(len(domains))]
		verb := d.verbs[r.IntN(len(d.verbs))]
		noun := d.nouns[r.IntN(len(d.nouns))]
		f1 := toolFields[r.IntN(len(toolFields))]
		f2 := toolFields[r.IntN(len(toolFields))]
		var e strings.Builder
		e.WriteString("\n")
		e.WriteString(strconv.Itoa(k))
		e.WriteString(". ")
		e.WriteString(snake(verb))
		e.WriteString("(")
		e.WriteString(snake(noun))
		e.WriteString("_id: string, ")
		e.WriteString(f1)
		e.WriteString(": string): use it to ")
		e.WriteString(verb)
		e.WriteString(" for the ")
		e.WriteString(noun)
		e.WriteString(" (")
		e.WriteString(d.name)
		e.WriteString("). Returns a JSON object with the fields ")
		e.WriteString(f1)
		e.WriteString(", ")
		e.WriteString(f2)
		e.WriteString(" and updated_at; on failure, an error field says why.")
		entry := e.String()
		if len(b)+len(entry) > limit {
			break
		}
		b = append(b, entry...)
		n += model.Count(entry)
	}
	return b
}

// snake turns "replace the chain" into "replace_the_chain".
func snake(s string) string {
	return strings.Map(func(r rune) rune {
		switch {
		case r == ' ' || r == '-' || r == '\'':
			return '_'
		case r >= 'A' && r <= 'Z':
			return r - 'A' + 'a'
		}
		return r
	}, s)
}

// toolResults are the later turns of an agent loop: a tool's result handed
// back to the model.
var toolResults = [...]string{
	`Tool result: {"status": "ok", "items": {#}, "note": "the {N} was updated"}. Continue.`,
	`Tool result: {"status": "error", "error": "the {N} is locked by {P}"}. Try another way.`,
	`Tool result: {"status": "ok", "total": {#}, "owner": "{P}", "due_date": "{T}"}. What is the next step?`,
	`Tool result: {"status": "ok", "changed": {%}, "tags": ["{A}", "{N}"]}. Go on.`,
	`Tool result: {"status": "pending", "retry_after_s": {#}}. Decide whether to wait or to {V}.`,
	`Tool result: {"status": "ok", "history": [{#}, {#}, {#}], "region": "{D}"}. Summarize and continue.`,
	`Tool result: {"status": "ok", "items": [], "note": "nothing matched the {N}"}. Continue.`,
	`Tool result: {"status": "ok", "amount": {#}, "priority": "{A}"}. Should we {V} now?`,
}

// sharedDoc is one document of a profile's shared documents.
type sharedDoc struct {
	text   string
	kind   string
	domain int
}

// sharedDocs writes the profile's shared documents, each cut so that a
// first turn pasting it, with the longest system prompt and the longest
// question, fits the context budget.
func (g *Generator) sharedDocs() []sharedDoc {
	p := &g.p
	const boundCharsPerWord = 8
	maxChars := (p.MaxContextTokens-p.MaxTokens-2*MessageOverheadTokens-p.systemBound())*CharsPerTokenEstimate -
		p.UserWordsMax*boundCharsPerWord - 2
	out := make([]sharedDoc, p.Documents)
	for k := range out {
		r := featureStream(g.seed, kindDocument, uint64(k))
		di := r.IntN(len(domains))
		w := writer{r: r, d: &domains[di]}
		w.kind = w.pick(w.d.kinds)
		if maxChars > 0 {
			w.document(p.DocWords, maxChars)
		}
		out[k] = sharedDoc{text: string(w.b), kind: w.kind, domain: di}
	}
	return out
}

// sharedDocTurn writes a first turn that pastes shared document d: the
// document first, then the question, so that conversations pasting the same
// document share the prompt's prefix up to the question.
func (g *Generator) sharedDocTurn(w *writer, d *sharedDoc, words int) {
	w.b = append(w.b, d.text...)
	w.b = append(w.b, "\n\n"...)
	dom, kind := w.d, w.kind
	w.d, w.kind = &domains[d.domain], d.kind
	w.message(docQuestions[:], words, g.p.UserWordsMax)
	w.d, w.kind = dom, kind
}
