package model

import "time"

// Roofline describes a model served on GPUs by its physical shape; its
// Config derives the step costs from it (see docs/engines.md):
//
//	decode step of b tokens  = StepFixed + W/(TP·BW·ηbw)            (weights read once)
//	                         + b · 2P/(TP·FLOPS·ηfl)                 (TokenCost)
//	                         + Σ context · KV/(TP·BW·ηbw)            (AttnCost: reading the KV cache)
//	prompt chunk of n tokens = n · 2P/(TP·FLOPS·ηfl)                 (PrefillTokenCost)
//	                         + pairs · 4·L·d/(TP·FLOPS·ηfl)          (PrefillAttnCost)
//
// P parameters, W weight bytes, KV bytes per token of context (all GPUs
// together), L layers of width d, BW and FLOPS one GPU's HBM bandwidth and
// dense bf16 throughput, ηbw and ηfl the fitted efficiencies, StepFixed the
// fitted per-step time that neither explains (kernel launches, the tensor-
// parallel all-reduces). The fits and the published figures they come from
// are in docs/notes/engines.md.
type Roofline struct {
	Params          float64 // parameters
	WeightBytes     float64 // bytes of weights, all GPUs together
	Layers, DModel  int
	KVBytesPerToken int // K and V of one token, all layers and GPUs
	TP              int // tensor-parallel GPUs
	HBMBytesPerSec  float64
	FLOPS           float64 // dense bf16, one GPU
	EffBW, EffFLOPS float64
	StepFixed       time.Duration

	MaxNumSeqs, MaxBatchedTokens, MaxModelLen, KVTokens int
}

func (r Roofline) bw() float64    { return float64(r.TP) * r.HBMBytesPerSec * r.EffBW }
func (r Roofline) flops() float64 { return float64(r.TP) * r.FLOPS * r.EffFLOPS }

func seconds(s float64) time.Duration { return time.Duration(s*1e9 + 0.5) }

// Config is the vLLM engine of this shape.
func (r Roofline) Config() Config {
	tok := seconds(2 * r.Params / r.flops())
	return Config{
		Engine:           EngineVLLM,
		NParallel:        r.MaxNumSeqs,
		CtxSize:          r.MaxNumSeqs * r.MaxModelLen,
		NBatch:           r.MaxBatchedTokens,
		BytesPerToken:    r.KVBytesPerToken,
		StepOverhead:     r.StepFixed + seconds(r.WeightBytes/r.bw()),
		TokenCost:        tok,
		AttnCost:         max(seconds(float64(r.KVBytesPerToken)/r.bw()), 1),
		PrefillTokenCost: tok,
		PrefillAttnCost:  max(seconds(4*float64(r.Layers*r.DModel)/r.flops()), 1),
		KVTokens:         r.KVTokens,
		AnswerMin:        32,
		AnswerMax:        1024,
		Seed:             1,
	}
}

// GPU figures (vendor data sheets): H100 SXM 3.35 TB/s HBM3 and 989 TFLOPS
// dense bf16; L4 300 GB/s GDDR6 and 121 TFLOPS dense bf16.
const (
	h100BW, h100FLOPS = 3.35e12, 989e12
	l4BW, l4FLOPS     = 300e9, 121e12
)

// The roofline presets (names: engine-gpu-model).
const (
	PresetH100Llama8B  = "vllm-h100-8b"     // Llama-3.1-8B, bf16, one H100
	PresetH100Llama70B = "vllm-4xh100-70b"  // Llama-3.1-70B, bf16, four H100s (TP4)
	PresetL4Qwen05B    = "vllm-l4-qwen0.5b" // Qwen2.5-0.5B, bf16, one L4
)

// Fitted efficiencies (docs/notes/engines.md): ηbw from vLLM decoding an
// 8B model at 77 % of the A100's bandwidth ceiling (johnmusgrave.com,
// "vLLM throughput-latency sweep on NVIDIA A100"); ηfl and StepFixed per
// preset from LambdaLabsML/vllm-benchmark (H100) and ai.wmx.dev/benchmarks
// (L4).
const effBW = 0.77

// RooflineH100Llama8B: Llama-3.1-8B (8.03 B parameters, 32 layers of 4096,
// 8 KV heads of 128: 131,072 KV bytes per token) on one H100 with vLLM's
// H100 defaults (256 sequences, 8192 tokens per step) and the KV pool of
// GPUH100Llama8B (450,560 tokens).
func RooflineH100Llama8B() Roofline {
	return Roofline{Params: 8.03e9, WeightBytes: 16.06e9, Layers: 32, DModel: 4096,
		KVBytesPerToken: 2 * 32 * 8 * 128 * 2, TP: 1, HBMBytesPerSec: h100BW, FLOPS: h100FLOPS,
		EffBW: effBW, EffFLOPS: 0.60, StepFixed: 700 * time.Microsecond,
		MaxNumSeqs: 256, MaxBatchedTokens: 8192, MaxModelLen: 131072, KVTokens: gpuKVTokens}
}

// RooflineH100Llama70B: Llama-3.1-70B (70.6 B parameters, 80 layers of
// 8192, 8 KV heads of 128: 327,680 KV bytes per token) on four H100s
// (TP4). KV pool: 0.9 × 4 × 79.6 GiB = 286.6 GiB less 131.5 GiB of weights
// and ~8 GiB of activations: 147 GiB = 481,689 tokens.
func RooflineH100Llama70B() Roofline {
	return Roofline{Params: 70.6e9, WeightBytes: 141.2e9, Layers: 80, DModel: 8192,
		KVBytesPerToken: 2 * 80 * 8 * 128 * 2, TP: 4, HBMBytesPerSec: h100BW, FLOPS: h100FLOPS,
		EffBW: effBW, EffFLOPS: 0.46, StepFixed: 3 * time.Millisecond,
		MaxNumSeqs: 256, MaxBatchedTokens: 8192, MaxModelLen: 131072, KVTokens: 147 << 30 / (2 * 80 * 8 * 128 * 2)}
}

// RooflineL4Qwen05B: Qwen2.5-0.5B (0.494 B parameters, 24 layers of 896,
// 2 KV heads of 64: 12,288 KV bytes per token) on one L4 (24 GB) with
// vLLM's defaults (256 sequences, 2048 tokens per step), max_model_len
// 32768 and gpu_memory_utilization 0.6 as in the published run: 0.6 ×
// 22.0 GiB less 0.92 GiB of weights and ~1 GiB of activations: 11.3 GiB =
// 987,000 tokens.
func RooflineL4Qwen05B() Roofline {
	return Roofline{Params: 0.494e9, WeightBytes: 0.988e9, Layers: 24, DModel: 896,
		KVBytesPerToken: 2 * 24 * 2 * 64 * 2, TP: 1, HBMBytesPerSec: l4BW, FLOPS: l4FLOPS,
		EffBW: effBW, EffFLOPS: 0.50, StepFixed: 800 * time.Microsecond,
		MaxNumSeqs: 256, MaxBatchedTokens: 2048, MaxModelLen: 32768, KVTokens: 987000}
}
