package policy

import "testing"

func TestApplyFacts(t *testing.T) {
	f := Facts{Slots: 256, CacheTokens: 450560, BlockSize: 32, PrefillTPS: 20000, DecodeTPS: 90}
	none := func(string) bool { return false }
	p := ApplyFacts(DefaultPredictive(), f, none).(*Predictive)
	if p.Slots != 256 || p.CacheTokens != 450560 || p.PriorPrefill != 20000 || p.PriorDecode != 90 {
		t.Errorf("predictive took %+v", p)
	}
	// A key the configuration gives keeps its value; the others take the facts.
	p = ApplyFacts(DefaultPredictive(), f, func(k string) bool { return k == "slots" }).(*Predictive)
	if p.Slots != 4 || p.CacheTokens != 450560 {
		t.Errorf("given slots: %+v", p)
	}
	// Unknown facts change nothing.
	p = ApplyFacts(DefaultPredictive(), Facts{Slots: 8}, none).(*Predictive)
	if d := DefaultPredictive(); p.Slots != 8 || p.CacheTokens != d.CacheTokens || p.PriorPrefill != d.PriorPrefill {
		t.Errorf("partial facts: %+v", p)
	}
	k := ApplyFacts(&KVCost{OverlapScoreWeight: 1, BlockSize: 16}, f, none).(*KVCost)
	if k.BlockSize != 32 {
		t.Errorf("kv-cost block size %d, want 32", k.BlockSize)
	}
	// A policy without fact keys is left alone.
	b := &Bounded{Epsilon: 0.25, Unit: Requests}
	if ApplyFacts(b, f, none).(*Bounded).Epsilon != 0.25 {
		t.Error("bounded changed")
	}
	// Out-of-range facts are clamped to what validation accepts.
	p = ApplyFacts(DefaultPredictive(), Facts{Slots: 1 << 30, BlockSize: 1 << 20}, none).(*Predictive)
	if err := p.Validate(); err != nil {
		t.Error(err)
	}
}
