package model

import "math"

// EmbeddingDim is the width of the simulated embeddings: the hidden size of
// Qwen2.5-0.5B (llama.cpp's n_embd for that model).
const EmbeddingDim = 896

// Embed returns a deterministic, L2-normalised embedding of toks, of
// EmbeddingDim dimensions: the mean of one pseudo-random direction per token
// id. Texts that share tokens get close vectors (cosine similarity grows with
// the share), which is all a retrieval pipeline needs from a simulator; the
// numbers mean nothing else. An empty input gives the zero vector.
func Embed(toks []Token) []float32 {
	acc := make([]float64, EmbeddingDim)
	for _, t := range toks {
		x := uint64(uint32(t)) * 0x9E3779B97F4A7C15
		for i := range acc {
			x = splitmix64(x)
			// A value in [-1, 1).
			acc[i] += float64(int64(x>>11))/float64(1<<52) - 1
		}
	}
	var norm float64
	for _, v := range acc {
		norm += v * v
	}
	out := make([]float32, EmbeddingDim)
	if norm == 0 {
		return out
	}
	norm = math.Sqrt(norm)
	for i, v := range acc {
		out[i] = float32(v / norm)
	}
	return out
}

// Cosine is the cosine similarity of two vectors of the same length (0 if
// either is zero).
func Cosine(a, b []float32) float64 {
	var dot, na, nb float64
	for i := range a {
		dot += float64(a[i]) * float64(b[i])
		na += float64(a[i]) * float64(a[i])
		nb += float64(b[i]) * float64(b[i])
	}
	if na == 0 || nb == 0 {
		return 0
	}
	return dot / math.Sqrt(na*nb)
}
