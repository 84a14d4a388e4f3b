// Package traffic generates the conversations of an experiment: simulated
// users holding multi-turn chats, deterministic from a profile and a seed.
//
// A Profile (profiles/*.json, ParseProfile, LoadProfile) gives the shape;
// Generate turns it into conversations: a shared system prompt, then turns
// of user text with think times. Drivers (the live runner, the simulator)
// send turn t with Messages, which resends the whole conversation with the
// replica's real previous answers, like a real chat client, and stop a
// conversation early when FitsContext says its next turn would not fit.
//
//	p, err := traffic.LoadProfile(os.DirFS("."), "standard")
//	convs, err := traffic.Generate(p, seed)
//	for t := range convs[i].Turns { // after sleeping Turns[t].ThinkS
//		if !traffic.Fits(p, &convs[i], t, prevTotalTokens) { break }
//		body, _ := traffic.ChatBody(model, traffic.Messages(&convs[i], t, answers), p.MaxTokens, stream)
//		...
//	}
//
// The package is pure: no clock, no I/O (LoadProfile and LoadTrace read
// from the fs.FS their caller passes), no goroutines, no package-level
// mutable state. Each conversation is drawn from its own random stream, derived by hashing (seed, index), so
// conversation i is the same whether 10 or 100,000 are generated, and a
// Generator can produce them lazily in any order.
package traffic

import (
	"fmt"
	"math/rand/v2"
)

// Conversation is one simulated chat.
type Conversation struct {
	// ID is stable and readable: "s<seed>-c<index>", e.g. "s1-c0007".
	ID string
	// Index is the conversation's position in the run, from 0.
	Index int
	// User is the closed-loop user that runs it: Index % Concurrency. User u
	// runs conversations u, u+Concurrency, u+2·Concurrency, ... one after
	// another, so every policy replays exactly the same sequence per user.
	User int
	// System is the system prompt, shared (same string) with the other
	// conversations that use it.
	System string
	// Doc tells whether the first turn pastes a document.
	Doc bool
	// SharedDoc is 1 + the index of the shared document (profile key
	// documents) the first turn pastes, or 0.
	SharedDoc int
	// Hot tells whether System is the profile's hot prompt.
	Hot bool
	// Turns are the user's messages, in order.
	Turns []Turn
	// Model is the model its requests ask for (the body's "model"), and
	// Adapter the LoRA adapter of it ("" none). Both are "" in the
	// generated profiles' traffic: the request names no model, and the
	// router's catch-all pool serves it (issue 23).
	Model, Adapter string
}

// Turn is one user message.
type Turn struct {
	// User is the text the user sends.
	User string
	// ThinkS is the wait, in model seconds, before sending: after the
	// previous answer, or for a first turn, after the user's previous
	// conversation ended (for the user's very first conversation: its
	// start offset within the ramp).
	ThinkS float64
	// MaxTokens is the request's max_tokens.
	MaxTokens int
}

// Generator produces the conversations of one (profile, seed). It holds
// only immutable data: the profile and the shared system prompts.
type Generator struct {
	p       Profile
	seed    int64
	systems []systemPrompt
	hot     string      // the hot prompt (profile key hot), or ""
	docs    []sharedDoc // the shared documents (profile key documents)
}

// NewGenerator validates p and draws the shared system prompts.
func NewGenerator(p Profile, seed int64) (*Generator, error) {
	if err := p.Validate(); err != nil {
		return nil, fmt.Errorf("profile %s: %w", p.Name, err)
	}
	g := &Generator{p: p, seed: seed, systems: systemPrompts(stream(seed, 0), p.SystemPrompts)}
	if p.SystemPromptTokens > 0 {
		for i := range g.systems {
			s := &g.systems[i]
			s.text = string(appendCatalogue([]byte(s.text), featureStream(seed, kindCatalogue, uint64(i)), p.SystemPromptTokens))
		}
	}
	if p.Hot != nil {
		hot := systemPrompts(featureStream(seed, kindHot, 0), 1)[0].text
		g.hot = string(appendCatalogue([]byte(hot), featureStream(seed, kindHot, 1), p.Hot.Tokens))
	}
	if p.Documents > 0 {
		g.docs = g.sharedDocs()
	}
	return g, nil
}

// HotPrompt returns the hot prompt (profile key hot), or "" without one.
func (g *Generator) HotPrompt() string { return g.hot }

// SharedDocuments returns the shared documents (profile key documents).
func (g *Generator) SharedDocuments() []string {
	out := make([]string, len(g.docs))
	for i := range g.docs {
		out[i] = g.docs[i].text
	}
	return out
}

// SystemPrompts returns the distinct system prompts shared by the
// conversations.
func (g *Generator) SystemPrompts() []string {
	out := make([]string, len(g.systems))
	for i, s := range g.systems {
		out[i] = s.text
	}
	return out
}

// Generate returns the profile's conversations for seed, in index order.
// The same profile and seed give the same conversations, byte for byte.
func Generate(p Profile, seed int64) ([]Conversation, error) {
	g, err := NewGenerator(p, seed)
	if err != nil {
		return nil, err
	}
	out := make([]Conversation, p.Conversations)
	var w writer
	for i := range out {
		g.conversation(i, &w, &out[i])
	}
	return out, nil
}

// Conversation returns conversation i (0 ≤ i < p.Conversations; any i ≥ 0
// works and extends the run deterministically).
func (g *Generator) Conversation(i int) Conversation {
	var c Conversation
	var w writer
	g.conversation(i, &w, &c)
	return c
}

func (g *Generator) conversation(i int, w *writer, c *Conversation) {
	p := &g.p
	r := stream(g.seed, uint64(i)+1)
	sys := &g.systems[r.IntN(len(g.systems))]
	// Half the users stay on the system prompt's main topic; the others ask
	// about anything.
	d := sys.domain
	if r.IntN(2) == 0 {
		d = r.IntN(len(domains))
	}
	*w = writer{b: w.b[:0], r: r, d: &domains[d], scratch: w.scratch[:0], tmp: w.tmp[:0], starts: w.starts[:0]}
	c.ID = fmt.Sprintf("s%d-c%04d", g.seed, i)
	c.Index = i
	c.User = i % p.Concurrency
	c.System = sys.text
	c.Doc = r.Float64() < p.DocShare
	c.SharedDoc, c.Hot = 0, false
	if p.Hot != nil || len(g.docs) > 0 {
		f := featureStream(g.seed, kindConversation, uint64(i))
		if p.Hot != nil && f.Float64() < p.Hot.Share {
			c.System, c.Hot = g.hot, true
		}
		if c.Doc && len(g.docs) > 0 {
			c.SharedDoc = 1 + f.IntN(len(g.docs))
		}
	}
	c.Turns = make([]Turn, p.TurnsMin+r.IntN(p.TurnsMax-p.TurnsMin+1))
	starts := append(w.starts[:0], make([]int, len(c.Turns))...)
	for t := range c.Turns {
		turn := &c.Turns[t]
		turn.MaxTokens = p.MaxTokens
		turn.ThinkS = p.ThinkSMin + float64(r.Float64()*(p.ThinkSMax-p.ThinkSMin))
		if t == 0 && i < p.Concurrency {
			// The user's first conversation: start at its place in the ramp.
			turn.ThinkS = float64(p.RampS*float64(c.User)) / float64(p.Concurrency)
		}
		words := p.UserWordsMin + r.IntN(p.UserWordsMax-p.UserWordsMin+1)
		starts[t] = len(w.b)
		w.words = 0
		switch {
		case t == 0 && c.SharedDoc > 0:
			g.sharedDocTurn(w, &g.docs[c.SharedDoc-1], words)
		case t == 0 && c.Doc:
			g.docTurn(w, c.System, words)
		case t == 0:
			w.message(questions[:], words, p.UserWordsMax)
		case p.TurnStyle == TurnTool:
			w.sentence(toolResults[r.IntN(len(toolResults))])
		default:
			w.message(followUps[:], words, p.UserWordsMax)
		}
	}
	// One allocation holds all the turns' texts.
	all := string(w.b)
	for t := range c.Turns {
		end := len(all)
		if t+1 < len(c.Turns) {
			end = starts[t+1]
		}
		c.Turns[t].User = all[starts[t]:end]
	}
	w.starts = starts
}

// docTurn writes a first turn that pastes a document: an intro line, the
// document, then the question. The document is cut short if the turn would
// not fit the context budget (FitsContext) with the system prompt.
func (g *Generator) docTurn(w *writer, system string, words int) {
	// One kind of document throughout ("this meal plan").
	w.kind = w.pick(w.d.kinds)
	defer func() { w.kind = "" }()
	// The question first, aside, so the document can be sized around it.
	start := len(w.b)
	w.message(docQuestions[:], words, g.p.UserWordsMax)
	w.tmp = append(w.tmp[:0], w.b[start:]...)
	w.b = w.b[:start]
	w.sentence(docIntros[w.r.IntN(len(docIntros))])
	w.b = append(w.b, "\n\n"...)
	budget := (g.p.MaxContextTokens - g.p.MaxTokens - 2*MessageOverheadTokens - EstimateTokens(system)) *
		CharsPerTokenEstimate
	if maxChars := budget - (len(w.b) - start) - 2 - len(w.tmp); maxChars > 0 {
		w.document(g.p.DocWords, maxChars)
	}
	if w.b[len(w.b)-1] != '\n' {
		w.b = append(w.b, "\n\n"...)
	}
	w.b = append(w.b, w.tmp...)
}

// stream returns the random source of (seed, n): stream 0 draws the system
// prompts, stream i+1 conversation i. Both PCG words are hashed from
// (seed, n) so that neighbouring streams are unrelated.
func stream(seed int64, n uint64) *rand.Rand {
	a := splitmix(uint64(seed) ^ 0x6c6c6d2d72696e67) // "llm-ring"
	return rand.New(rand.NewPCG(splitmix(a+n), splitmix(a^splitmix(n+0x9e3779b97f4a7c15))))
}

// splitmix is the SplitMix64 finalizer: a bijective 64-bit mix.
func splitmix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}
