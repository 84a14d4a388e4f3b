package model

import (
	"time"

	"github.com/llm-ring/llm-ring/internal/policy"
)

// Facts are the engine facts a policy may take from this configuration
// (policy.Facts): the slots (max_num_seqs on a paged engine), the prompt
// cache's capacity in tokens (llama.cpp: every slot's context plus the RAM
// prompt cache; a paged engine: its KV pool), the block size of a paged
// engine, the prefill rate of a prompt token (attention and per-chunk
// overheads left out) and the decode rate of one sequence alone (a step
// with one token).
func (c Config) Facts() policy.Facts {
	f := policy.Facts{Slots: c.NParallel}
	if c.Paged() {
		f.CacheTokens, f.BlockSize = float64(c.kvPoolTokens()), c.blockSize()
	} else {
		f.CacheTokens = float64(c.CtxSize)
		if c.CacheRAMMiB > 0 && c.BytesPerToken > 0 {
			f.CacheTokens += float64(int64(c.CacheRAMMiB)<<20) / float64(c.BytesPerToken)
		}
	}
	perToken := c.PrefillTokenCost
	if perToken <= 0 {
		perToken = c.TokenCost
	}
	f.PrefillTPS = rate(perToken)
	f.DecodeTPS = rate(c.StepOverhead + c.TokenCost)
	return f
}

// rate is one per d, per second (0 when d is not positive: unknown).
func rate(d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return float64(time.Second) / float64(d)
}
