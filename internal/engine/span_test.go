package engine

import (
	"encoding/json"
	"testing"
)

var spanCases = []string{
	`{}`, ` { } `, `{"stream_options":{"include_usage":true}}`,
	`{"a":1,"stream_options":null,"b":[1,{"stream_options":2}],"stream_options":{"x":"}]\"{"}}`,
	`{"s\u0074ream_options":[1,2],"c":"x\\"}`, `{"timings":{"cache_n":1},"choices":[]}`,
	`{"a":-1.5e3,"b":true,"c":false,"d":null,"timings":"t"}`, `[{"timings":1}]`, `"timings"`, `{"x":{"timings":1}}`,
}

func checkSpan(t *testing.T, obj string) {
	for _, key := range []string{"stream_options", "timings", "include_usage", "a"} {
		s1, e1, ok1 := fastMemberSpan([]byte(obj), key)
		s2, e2, ok2 := memberSpanDecoder([]byte(obj), key)
		if s1 != s2 || e1 != e2 || ok1 != ok2 {
			t.Fatalf("%q, %s: span %d %d %v, the decoder's %d %d %v", obj, key, s1, e1, ok1, s2, e2, ok2)
		}
	}
}

// TestMemberSpanAgrees: the walk finds the span encoding/json's Decoder
// finds, on valid JSON (memberSpan's callers decode the object first).
func TestMemberSpanAgrees(t *testing.T) {
	for _, c := range spanCases {
		checkSpan(t, c)
	}
}

func FuzzMemberSpan(f *testing.F) {
	for _, c := range spanCases {
		f.Add(c)
	}
	f.Fuzz(func(t *testing.T, obj string) {
		if !json.Valid([]byte(obj)) {
			return
		}
		checkSpan(t, obj)
	})
}
