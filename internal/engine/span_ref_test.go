package engine

import (
	"bytes"
	"encoding/json"
)

// memberSpanDecoder is memberSpan over encoding/json's Decoder (the
// reference of TestMemberSpanAgrees). It finds the value of key among obj's top-level members: its
// byte span [start, end). The last occurrence wins, as in encoding/json.
func memberSpanDecoder(obj []byte, key string) (start, end int, ok bool) {
	dec := json.NewDecoder(bytes.NewReader(obj))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return 0, 0, false
	}
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return 0, 0, false
		}
		k, _ := t.(string)
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return 0, 0, false
		}
		if k == key {
			e := int(dec.InputOffset())
			start, end, ok = e-len(raw), e, true
		}
	}
	return start, end, ok
}
