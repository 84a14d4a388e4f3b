package engine

import (
	"bytes"
	"encoding/json"
	"testing"
)

// slowUsageOnly is usageOnly's reading by encoding/json (what the filter
// did before fastUsageOnly).
func slowUsageOnly(data []byte) bool {
	var c struct {
		Choices []json.RawMessage `json:"choices"`
		Usage   json.RawMessage   `json:"usage"`
	}
	return json.Unmarshal(data, &c) == nil && c.Choices != nil && len(c.Choices) == 0 &&
		len(c.Usage) > 0 && !bytes.Equal(c.Usage, []byte("null"))
}

var usageOnlySeeds = []string{
	`{"id":"x","choices":[],"usage":{"prompt_tokens":5}}`,
	`{"choices":[ ],"usage":{}}`,
	`{"choices":[],"usage":null}`,
	`{"choices":null,"usage":{}}`,
	`{"choices":[{"index":0}],"usage":{}}`,
	`{"choices":[],"usage":{},"choices":[1]}`,
	`{"choices":[1],"choices":[],"usage":1}`,
	`{"CHOICES":[],"Usage":{}}`,
	`{"choices":"x","usage":{}}`,
	`{"choices":{},"usage":{}}`,
	`{"choices":[],"usage":{}`,
	`{"choices":[],"usage":{}} x`,
	`[]`, `null`, `"x"`, ``, `{}`,
	` { "choices" : [ ] , "usage" : 0 } `,
	`{"choice\u0073":[],"usage":{}}`,
	"{\"choice\u017f\":[],\"usage\":{}}",
	`{"choices":[],"usage":{},"choices":null}`,
}

func TestFastUsageOnlyAgrees(t *testing.T) {
	for _, s := range usageOnlySeeds {
		f := &Filter{}
		if got, want := f.usageOnly([]byte(s)), slowUsageOnly([]byte(s)); got != want {
			t.Errorf("%s: usageOnly %t, encoding/json %t", s, got, want)
		}
	}
}

func FuzzUsageOnly(f *testing.F) {
	for _, s := range usageOnlySeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if got, want := (&Filter{}).usageOnly(data), slowUsageOnly(data); got != want {
			t.Errorf("%q: usageOnly %t, encoding/json %t", data, got, want)
		}
	})
}
