package router

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/llm-ring/llm-ring/internal/wire"
)

// decodedCounts is what encoding/json reads of an answer: the reference
// parseAnswer must agree with (the router's parser before counts.go).
func decodedCounts(data []byte) (c counts, stop, ok bool) {
	var a struct {
		Timings *wire.Timings `json:"timings"`
		Usage   *wire.Usage   `json:"usage"`
		Stop    bool          `json:"stop"`
	}
	if json.Unmarshal(data, &a) != nil {
		return counts{}, false, false
	}
	switch {
	case a.Timings != nil:
		t := a.Timings
		c = counts{known: true, cacheN: t.CacheN, promptN: t.PromptN, predictedN: t.PredictedN, promptMS: t.PromptMS, predictedMS: t.PredictedMS}
	case a.Usage != nil:
		u, cached := a.Usage, 0
		if u.PromptTokensDetails != nil {
			cached = u.PromptTokensDetails.CachedTokens
		}
		c = counts{known: true, cacheN: cached, promptN: max(0, u.PromptTokens-cached), predictedN: u.CompletionTokens, cachedUnknown: u.PromptTokensDetails == nil}
	}
	return c, a.Stop, true
}

var answerSamples = []string{
	cannedAnswer,
	`{"choices":[{"index":0,"delta":{},"finish_reason":"stop"}],"timings":{"cache_n":200,"prompt_n":60,"predicted_n":8,"prompt_ms":1.5,"predicted_ms":4.0}}`,
	`{"choices":[],"usage":{"prompt_tokens":260,"completion_tokens":8,"total_tokens":268,"prompt_tokens_details":{"cached_tokens":200}}}`,
	`{"usage":{"prompt_tokens":26,"completion_tokens":8}}`,
	`{"usage":{"prompt_tokens":26,"completion_tokens":8,"prompt_tokens_details":null}}`,
	`{"usage":null,"timings":null}`,
	`{"content":"a \"quoted\" \\ word \u00e9","stop":true,"timings":{"prompt_ms":12.345678901234,"predicted_ms":1e3,"cache_n":-1}}`,
	`{"stop":false,"timings":{"predicted_per_second":55.1,"prompt_ms":0.123456789012345678}}`,
	`  {"timings" : { "cache_n" : 3 , "prompt_n":4 } , "x":[1,2,{"a":[true,false,null]}] }  `,
	`{"timings":{"cache_n":1.5}}`,
	`{"timings":{"cache_n":"3"}}`,
	`{"timings":{"cache_n":3}`,
	`{"timings":{"cache_n":3}}x`,
	`{"stop":true,}`,
	`[1,2]`,
	``,
	`{}`,
	`{"usage":{"prompt_tokens":99999999999999999999999}}`,
	`{"timings":{"prompt_ms":-0.5,"predicted_ms":1.7976931348623157e308}}`,
	`{"a":"unterminated}`,
	`{"timings":{"cache_n":3},"timings":{"prompt_n":5}}`,
}

// TestParseAnswerAgrees: the one-pass parser reads what encoding/json reads.
func TestParseAnswerAgrees(t *testing.T) {
	for _, s := range answerSamples {
		checkParseAnswer(t, []byte(s))
	}
}

func checkParseAnswer(t *testing.T, data []byte) {
	t.Helper()
	want, wantStop, wantOK := decodedCounts(data)
	var a answerFields
	err := parseAnswer(data, &a)
	got, _ := a.counts()
	if (err == nil) != wantOK || wantOK && (got != want || a.stop != wantStop) {
		t.Errorf("%q:\n got %+v stop %t err %v\nwant %+v stop %t ok %t", data, got, a.stop, err, want, wantStop, wantOK)
	}
}

func FuzzParseAnswer(f *testing.F) {
	for _, s := range answerSamples {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if !json.Valid(data) || bytes.IndexByte(data, '\\') >= 0 {
			var a answerFields
			parseAnswer(data, &a) // must not panic; malformed input may fail anywhere
			return
		}
		checkParseAnswer(t, data)
	})
}

func TestParseAnswerAllocates0(t *testing.T) {
	data := []byte(cannedAnswer)
	if n := testing.AllocsPerRun(100, func() { var a answerFields; parseAnswer(data, &a) }); n != 0 {
		t.Errorf("parseAnswer allocates %.0f times", n)
	}
}
