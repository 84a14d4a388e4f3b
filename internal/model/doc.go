// Package model is a pure, deterministic model of a llama.cpp server: its
// slots, its prompt cache (slot states and a RAM cache with LRU eviction,
// reused by longest common prefix), its FIFO queue, and the cost of its
// continuous-batching steps. It has no clock, no I/O and no goroutines: the
// caller passes model time (a time.Duration since any origin) to every call,
// so the same code serves the HTTP replica (internal/replica) and the
// discrete-event simulator.
//
// A replica with a CPU of its own:
//
//	r, err := model.New(model.DefaultConfig())
//	toks := model.ChatTokens([]model.Message{{Role: "user", Content: "Hi"}})
//	id, err := r.Submit(now, model.Request{Tokens: toks, NPredict: 128})
//	for {
//		t, ok := r.NextEvent() // the earliest time something may happen
//		if !ok {
//			break // idle
//		}
//		evs = r.Advance(t, evs[:0])
//		for _, e := range evs {
//			if e.Kind == model.EventDone {
//				use(e.Result) // CacheN, PromptN, PredictedN, Output, times, Timings()
//			}
//		}
//	}
//
// Several replicas sharing one CPU (processor sharing: k busy replicas each
// run k times slower) are a Group: NewGroup(true, cfgs...), whose Submit,
// Cancel, NextEvent and Advance take a member index.
//
// The tokenizer (Tokenize, Count, AppendTokens, AppendPieces), the ChatML
// template (RenderChat, ChatTokens, AppendMessageTokens,
// AppendAssistantTokens, AppendGenerationPrompt) and the answer generator
// (GenerateAnswer) are here too, so that everything that renders or counts
// tokens agrees with the replica. A simulator should keep each
// conversation's tokens and append messages to them, rather than
// re-tokenizing the history every turn.
//
// Config.Engine "vllm" or "sglang" replaces the slots with a paged KV pool
// shared by every request (hashed blocks, reference counts, an LRU free
// queue) and vLLM V1's scheduler (chunked prefill, FCFS, preemption by
// recomputation), behind the same Group and Replica API (paged*.go); the
// Roofline presets derive GPU step costs from a model's shape
// (preset_roofline.go).
//
// Formulas, choices and limits: docs/replica-model.md and, for the paged
// engines and the roofline presets, docs/engines.md; calibration:
// docs/notes/replica-model.md and docs/notes/engines.md.
package model
