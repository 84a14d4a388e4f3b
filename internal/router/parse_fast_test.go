package router

import (
	"bytes"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/llm-ring/llm-ring/internal/prefix"
)

// agreeFast checks the fast path against parseJSON (encoding/json) on one
// body: where the fast path accepts, parseJSON accepts with the same
// reading (key, turn, size, blocks, first user message, output, stream,
// and the body sent upstream after prepareStream); where it declines,
// parseRequest answers exactly what parseJSON answers. It reports whether
// the fast path took the body.
func agreeFast(t *testing.T, body string, h http.Header) bool {
	t.Helper()
	var hsFast, hsJSON, hsReq prefix.Hasher
	hsFast.Reset(16)
	hsJSON.Reset(16)
	hsReq.Reset(16)
	want, werr := parseJSON(kindChat, h, []byte(body), &testRules, &hsJSON)
	got, ok := parseChatFast(h, []byte(body), &testRules, &hsFast)
	if !ok {
		p, err := parseRequest(kindChat, h, []byte(body), &testRules, &hsReq)
		if errText(err) != errText(werr) || !sameParse(p, want) {
			t.Fatalf("%q: parseRequest %+v, %v; parseJSON %+v, %v", body, p, err, want, werr)
		}
		return false
	}
	if werr != nil {
		t.Fatalf("%q: the fast path accepts what parseJSON rejects (%v)", body, werr)
	}
	if !sameParse(got, want) {
		t.Fatalf("%q:\nfast %+v\njson %+v", body, got, want)
	}
	ff := &flight{kind: kindChat, p: got, body: []byte(body)}
	fj := &flight{kind: kindChat, p: want, body: []byte(body)}
	e1, e2 := ff.prepareStream(), fj.prepareStream()
	if errText(e1) != errText(e2) || !bytes.Equal(ff.body, fj.body) || ff.injected != fj.injected {
		t.Fatalf("%q: upstream body\nfast %s (%v, %v)\njson %s (%v, %v)", body, ff.body, ff.injected, e1, fj.body, fj.injected, e2)
	}
	return true
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

func sameParse(a, b parsed) bool {
	return a.key == b.key && a.keySource == b.keySource && a.turn == b.turn && a.chars == b.chars &&
		a.tokens == b.tokens && a.maxTokens == b.maxTokens && a.stream == b.stream &&
		a.firstUser == b.firstUser && a.model == b.model && slices.Equal(a.blocks, b.blocks)
}

// fastBodies are chat bodies the fast path must take itself.
var fastBodies = []string{
	`{"model":"m","max_tokens":8,"stream":false,"messages":[{"role":"system","content":"You are terse."},{"role":"user","content":"hi"}]}`,
	`{"messages":[{"role":"user","content":"hi"}],"max_tokens":8,"stream":true}`,
	`{"messages":[{"role":"user","content":"hi"}],"stream":true,"stream_options":{"include_usage":false}}`,
	`{"messages":[{"role":"user","content":"hi"}],"stream":true,"stream_options":null}`,
	`{"stream":true,"messages":[{"role":"user","content":"a"}]}  `,
	` {"messages" : [ {"content":"x\ny\t\"q\" \\ \/ \u00e9\ud83d\ude00\ud800 z","role":"user"} ] , "n_predict":-1, "max_tokens":12}`,
	`{"messages":[{"role":"user","content":[{"type":"text","text":"a"},{"type":"image_url","image_url":{"url":"x"}},null,{"text":"b","type":"text"}]}]}`,
	`{"messages":[{"role":"user","content":[{"type":"text","text":"only"}]},{"role":"assistant","content":null},{"role":"tool"}]}`,
	`{"messages":[{"role":"user","content":"héllo wörld, ünïcode prompt of some length"}],"user":"u-42"}`,
	`{"messages":[{"role":"user","content":"x"}],"user":null,"max_completion_tokens":null,"max_tokens":-1,"n_predict":null}`,
	`{"messages":[{"role":"developer","content":"d"},{"role":"user","content":"q"},{"role":"assistant","content":"a"},{"role":"user","content":"q2"}],"tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object","properties":{}}}}],"temperature":0.7e-1,"top_p":1,"stop":["\n"],"logit_bias":{"1":-100}}`,
	`{"messages":[{"role":"us\u0065r","content":"escaped role"}]}`,
	"{\"messages\":[{\"role\":\"user\",\"content\":\"bad utf8 \xff\xfe here\"}]}",
	`{"model":null,"messages":[{"role":"user","content":"x"}]}`,
	`{"messages":[{"role":"user","content":"x"}],"model":"sql-l\u006fra"}`,
	`{"messages":[{"role":"user","content":"x"}],"model":""}`,
	`{"messages":[{"role":"user","content":"x"}],"model":"llamä-3"}`,
}

// slowBodies are bodies the fast path must decline (parseJSON reads them,
// or rejects them with its 400).
var slowBodies = []string{
	``, ` `, `null`, `[]`, `"x"`, `{`, `{"messages":[{"role":"user","content":"x"}]}x`,
	`{"messages":[{"role":"user","content":"x"}]}{}`,
	`{"messages":null}`, `{"messages":[]}`, `{"messages":{}}`, `{"messages":[null]}`, `{"messages":[1]}`,
	`{"messages":[{"content":"x"}]}`, `{"messages":[{"role":"","content":"x"}]}`, `{"messages":[{"role":5}]}`,
	`{"messages":[{"role":"user","content":5}]}`, `{"messages":[{"role":"user","content":{}}]}`,
	`{"messages":[{"role":"user","content":[1]}]}`, `{"messages":[{"role":"user","content":[{"type":"text","text":5}]}]}`,
	`{"messages":[{"Role":"user","content":"x"}]}`, `{"messages":[{"role":"user","Content":"x"}]}`,
	`{"messages":[{"role":"user","role":"system","content":"x"}]}`,
	`{"messages":[{"role":"user","content":"x"}],"Stream":true}`,
	`{"messages":[{"role":"user","content":"x"}],"stream":true,"STREAM_OPTIONS":{}}`,
	`{"messages":[{"role":"user","content":"x"}],"stream":true,"stream":false}`,
	`{"messages":[{"role":"user","content":"x"}],"stream":"yes"}`,
	`{"messages":[{"role":"user","content":"x"}],"max_tokens":1.5}`,
	`{"messages":[{"role":"user","content":"x"}],"max_tokens":1e3}`,
	`{"messages":[{"role":"user","content":"x"}],"max_tokens":-2}`,
	`{"messages":[{"role":"user","content":"x"}],"max_tokens":99999}`,
	`{"messages":[{"role":"user","content":"x"}],"max_tokens":123456789012345678901234}`,
	`{"messages":[{"role":"user","content":"x"}],"user":5}`,
	`{"messages":[{"role":"user","content":"x"}],"model":5}`, `{"messages":[{"role":"user","content":"x"}],"model":["a"]}`,
	`{"model":"a","messages":[{"role":"user","content":"x"}],"model":"b"}`, `{"Model":"a","messages":[{"role":"user","content":"x"}]}`,
	`{"messages":[{"role":"user","content":"x"}],"\u00b5":1}`,
	`{"messages":[{"role":"user","content":"x"}],"a":01}`, `{"messages":[{"role":"user","content":"x"}],"a":-}`,
	`{"messages":[{"role":"user","content":"x"}],"a":tru}`, `{"messages":[{"role":"user","content":"x\q"}]}`,
	`{"messages":[{"role":"user","content":"x\u12"}]}`, "{\"messages\":[{\"role\":\"user\",\"content\":\"a\x01b\"}]}",
	`{"messages":[{"role":"user","content":"x"},]}`, `{"messages":[{"role":"user","content":"x"}],}`,
	`{"messages":[{"role":"user","content":"x"}],"a":[1,]}`, `{"messages":[{"role":"user","content":"x"}] "a":1}`,
	`{"messages":[{"role":"user","content":"x"}],"deep":` + strings.Repeat("[", 600) + strings.Repeat("]", 600) + `}`,
}

func TestFastParseAgrees(t *testing.T) {
	for _, h := range []http.Header{{}, {"X-Conversation-Id": {"c1"}}, {"X-Turn": {"3"}}} {
		for _, b := range fastBodies {
			if !agreeFast(t, b, h) {
				t.Errorf("the fast path declined %q", b)
			}
		}
		for _, b := range slowBodies {
			if agreeFast(t, b, h) {
				t.Errorf("the fast path took %q", b)
			}
		}
	}
}

// FuzzFastParse: on any body, the fast path and parseJSON agree (or the
// fast path declines and parseRequest answers as parseJSON does).
func FuzzFastParse(f *testing.F) {
	for _, b := range fastBodies {
		f.Add(b, false)
	}
	for _, b := range slowBodies[:len(slowBodies)-1] {
		f.Add(b, true)
	}
	f.Fuzz(func(t *testing.T, body string, header bool) {
		h := http.Header{}
		if header {
			h.Set("x-conversation-id", "c")
		}
		agreeFast(t, body, h)
	})
}

// TestPlainRunAndIsASCII: the word-at-a-time scans stop no later than the
// first byte the byte loop must look at (and stop only in its word), and
// isASCII is the byte loop's answer, for every byte at every offset.
func TestPlainRunAndIsASCII(t *testing.T) {
	for n := range 40 {
		for pos := range n + 1 {
			for c := range 256 {
				b := bytes.Repeat([]byte{'a'}, n)
				if pos < n {
					b[pos] = byte(c)
				}
				first := n
				for i, x := range b {
					if x == '"' || x == '\\' || x < 0x20 {
						first = i
						break
					}
				}
				if got := plainRun(b); got > first || got < first/8*8 || got%8 != 0 {
					t.Fatalf("plainRun(%q) = %d, first byte to look at %d", b, got, first)
				}
				ascii := pos >= n || c < 0x80
				if isASCII(b) != ascii {
					t.Fatalf("isASCII(%q) = %t", b, !ascii)
				}
			}
		}
	}
}
