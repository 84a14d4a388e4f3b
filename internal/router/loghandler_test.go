package router

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/llm-ring/llm-ring/internal/replicaset"
	"github.com/llm-ring/llm-ring/internal/wire"
)

// hostile are strings a log line carries from clients and replicas:
// quotes, backslashes, every control byte, HTML's characters, invalid and
// truncated UTF-8, the JavaScript line separators, U+FFFD itself.
var hostile = func() []string {
	s := []string{"", "plain", `"quoted"`, `back\slash`, "<script>&amp;</script>", "tab\tnl\nrc\r",
		"\x00\x01\x1f\x7f", "\xff", "a\xc3", "\xe2\x80", "é…日本", "\u2028\u2029", "\ufffd", "\xed\xa0\x80",
		"\xf4\x90\x80\x80", "mixed \"é\"\x02<\xff>\u2028 end"}
	var all strings.Builder
	for b := range 256 {
		all.WriteByte(byte(b))
	}
	return append(s, all.String(), strings.Repeat("x\"é", 2000))
}()

// viaSlog is what slog's JSONHandler writes for a record at t with the
// fields fill gives an attrLine.
func viaSlog(t time.Time, level slog.Level, msg string, fill func(lineEncoder)) []byte {
	var l attrLine
	fill(&l)
	var buf bytes.Buffer
	rec := slog.NewRecord(t, level, msg, 0)
	rec.AddAttrs(l.a...)
	if err := slog.NewJSONHandler(&buf, nil).Handle(context.Background(), rec); err != nil {
		panic(err)
	}
	return buf.Bytes()
}

// direct is the same line through jsonLine.
func direct(t time.Time, level slog.Level, msg string, fill func(lineEncoder)) ([]byte, bool) {
	var j jsonLine
	j.begin(t, level, msg)
	fill(&j)
	j.end()
	return j.b, j.ok
}

// TestJSONLineMatchesJSONHandler: every kind of field the request line
// writes, with hostile strings and edge numbers, is the JSONHandler's bytes.
func TestJSONLineMatchesJSONHandler(t *testing.T) {
	at := time.Date(2026, 12, 2, 19, 30, 1, 123456789, time.FixedZone("x", 3600))
	floats := []float64{0, math.Copysign(0, -1), 1, -1, 0.001, 1.5, 12.345, 1e-6, 9.99e-7, 1e-7, 1.5e-300,
		1e20, 1e21, 1.2345e22, math.MaxFloat64, math.SmallestNonzeroFloat64, -3e-9, 123456789.123}
	ints := []int64{0, 1, -1, 4096, math.MaxInt64, math.MinInt64}
	for i, s := range hostile {
		f := floats[i%len(floats)]
		n := ints[i%len(ints)]
		fill := func(e lineEncoder) {
			e.str(s, s) // a hostile key too
			e.str("k", s)
			e.int("n", n)
			e.bool("b", i%2 == 0)
			e.float("f", f)
			e.hex("h", uint64(n)*0x9e3779b97f4a7c15)
			e.text("t", []byte(s), 7) // cut anywhere, in a character too
			e.text("whole", []byte(s), maxTrace)
		}
		for _, lv := range []slog.Level{slog.LevelInfo, slog.LevelWarn, slog.LevelError, slog.LevelDebug} {
			got, ok := direct(at, lv, s, fill)
			want := viaSlog(at, lv, s, fill)
			if !ok || !bytes.Equal(got, want) {
				t.Fatalf("%d %v (ok %t):\n got %s\nwant %s", i, lv, ok, got, want)
			}
		}
	}
	for _, f := range floats {
		fill := func(e lineEncoder) { e.float("f", f); e.float("g", -f) }
		if got, _ := direct(at, slog.LevelInfo, "m", fill); !bytes.Equal(got, viaSlog(at, slog.LevelInfo, "m", fill)) {
			t.Fatalf("%g: %s", f, got)
		}
	}
	// What json.Marshal refuses is left to slog: the line is not ok.
	for _, f := range []float64{math.NaN(), math.Inf(1), math.Inf(-1)} {
		if _, ok := direct(at, slog.LevelInfo, "m", func(e lineEncoder) { e.float("f", f) }); ok {
			t.Fatalf("%g written directly", f)
		}
	}
	if _, ok := direct(time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC), slog.LevelInfo, "m", func(lineEncoder) {}); ok {
		t.Fatal("a year past 9999 written directly")
	}
}

// FuzzJSONLine: any strings, bytes and numbers give the JSONHandler's line.
func FuzzJSONLine(f *testing.F) {
	for i, s := range hostile[:len(hostile)-2] {
		f.Add(s, []byte(s), float64(i)*1.37, int64(i)-3, i%5)
	}
	f.Add("", []byte{0xff, 0xfe}, 1e-7, int64(math.MinInt64), 0)
	at := time.Date(2026, 12, 2, 19, 30, 1, 5, time.UTC)
	f.Fuzz(func(t *testing.T, s string, b []byte, x float64, n int64, cut int) {
		fill := func(e lineEncoder) {
			e.str("s", s)
			e.str(s, "v")
			e.int("n", n)
			e.float("x", x)
			e.hex("h", uint64(n))
			e.text("b", b, max(cut, 0)%(len(b)+2))
			e.text("s2", []byte(s), maxTrace)
		}
		got, ok := direct(at, slog.LevelInfo, s, fill)
		if !ok {
			if !math.IsNaN(x) && !math.IsInf(x, 0) {
				t.Fatalf("not ok for %g", x)
			}
			return
		}
		if want := viaSlog(at, slog.LevelInfo, s, fill); !bytes.Equal(got, want) {
			t.Fatalf("\n got %s\nwant %s", got, want)
		}
	})
}

// TestRequestLineMatchesJSONHandler: the router's request lines through
// NewLogHandler and through slog's JSONHandler, for the same requests (a
// hostile model name, an upstream failure, a stream), have the same keys in
// the same order and the same values but for the times.
func TestRequestLineMatchesJSONHandler(t *testing.T) {
	lines := func(mk func(io.Writer) slog.Handler) []string {
		var buf bytes.Buffer
		up := &scriptedUpstream{}
		rs := []replicaset.Replica{{Name: "llm-0", URL: "http://10.0.0.1:8080"}, {Name: "llm-1", URL: "http://10.0.0.2:8080"}}
		cfg := testConfig(t, "llm-aware", rs)
		cfg.HealthCheck.Interval = 0
		rt, err := New(Options{Config: cfg, Logger: slog.New(mk(syncWriter{w: &buf})), Transport: up})
		if err != nil {
			t.Fatal(err)
		}
		rt.SetReplicas(rs)
		for i, model := range []string{"m", "m\"<>&\\\u2028\t\x01é\xff", strings.Repeat("long\"", 40)} {
			for _, stream := range []bool{false, true} {
				up.fail, up.err = i == 1 && stream, i == 2 && stream
				body := fmt.Sprintf(`{"model":"%s","stream":%t,"messages":[{"role":"user","content":"hi %d"}]}`,
					rawJSON(model), stream, i)
				req, _ := http.NewRequest(http.MethodPost, "http://router"+wire.PathChatCompletions, strings.NewReader(body))
				req.Header.Set("x-conversation-id", "c"+strconv.Itoa(i))
				if stream {
					req.Header.Set("x-bench-stream", "1")
				}
				rt.ServeHTTP(&discardWriter{h: http.Header{}}, req)
			}
		}
		var out []string
		sc := bufio.NewScanner(&buf)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			if strings.Contains(sc.Text(), `"msg":"request"`) {
				out = append(out, sc.Text())
			}
		}
		return out
	}
	got := lines(func(w io.Writer) slog.Handler { return NewLogHandler(w, nil) })
	want := lines(func(w io.Writer) slog.Handler { return slog.NewJSONHandler(w, nil) })
	if len(got) != 6 || len(got) != len(want) {
		t.Fatalf("%d and %d request lines, want 6", len(got), len(want))
	}
	for i := range got {
		g, w := untimed(t, got[i]), untimed(t, want[i])
		if g != w {
			t.Fatalf("line %d:\n got %s\nwant %s", i, g, w)
		}
	}
	if !strings.Contains(got[2], `"model":"m\"<>&\\\u2028\t\u0001é`) ||
		!strings.Contains(got[3], `"level":"WARN"`) || !strings.Contains(got[5], `"error_kind"`) {
		t.Fatalf("the hostile model or the failures are not in the lines:\n%s\n%s\n%s", got[2], got[3], got[5])
	}
}

// rawJSON escapes only what a JSON string must (quotes, backslashes,
// control bytes), leaving invalid UTF-8 in as it is.
func rawJSON(s string) string {
	var b strings.Builder
	for i := range len(s) {
		switch c := s[i]; {
		case c == '"' || c == '\\':
			b.WriteByte('\\')
			b.WriteByte(c)
		case c < 0x20:
			fmt.Fprintf(&b, `\u%04x`, c)
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}

// untimed is a line's keys and raw values in order, the times blanked.
func untimed(t *testing.T, line string) string {
	d := json.NewDecoder(strings.NewReader(line))
	var m map[string]json.RawMessage
	if err := json.Unmarshal([]byte(line), &m); err != nil {
		t.Fatalf("%v: %s", err, line)
	}
	var b strings.Builder
	d.Token() // {
	for d.More() {
		k, _ := d.Token()
		var v json.RawMessage
		d.Decode(&v)
		switch k {
		case "time", "latency_ms", "ttft_ms":
			v = json.RawMessage(`"·"`)
		}
		fmt.Fprintf(&b, "%s=%s ", k, v)
	}
	return b.String()
}

// scriptedUpstream is cannedUpstream, answering 500 or failing to connect
// when told to.
type scriptedUpstream struct{ fail, err bool }

func (u *scriptedUpstream) RoundTrip(req *http.Request) (*http.Response, error) {
	if u.err {
		return nil, errors.New("dial tcp: \"<x>\" \x01 \xff refused")
	}
	if !u.fail {
		return cannedUpstream{}.RoundTrip(req)
	}
	io.Copy(io.Discard, req.Body)
	return &http.Response{StatusCode: 500, Status: "500 Internal Server Error", Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: http.Header{"Content-Type": {"text/plain"}}, Body: io.NopCloser(strings.NewReader("boom \"<x>\"\n")), ContentLength: 11, Request: req}, nil
}

// TestLogHandlerOptions: the operator's level is honoured, and a
// ReplaceAttr, AddSource or a derived handler sends the request line
// through slog, where they apply.
func TestLogHandlerOptions(t *testing.T) {
	run := func(h slog.Handler) *Router {
		rs := []replicaset.Replica{{Name: "llm-0", URL: "http://10.0.0.1:8080"}}
		cfg := testConfig(t, "consistent", rs)
		cfg.HealthCheck.Interval = 0
		rt, err := New(Options{Config: cfg, Logger: slog.New(h), Transport: cannedUpstream{}})
		if err != nil {
			t.Fatal(err)
		}
		rt.SetReplicas(rs)
		req, _ := http.NewRequest(http.MethodPost, "http://router"+wire.PathChatCompletions,
			strings.NewReader(`{"model":"m","messages":[{"role":"user","content":"hi"}]}`))
		rt.ServeHTTP(&discardWriter{h: http.Header{}}, req)
		return rt
	}
	var buf bytes.Buffer
	if rt := run(NewLogHandler(&buf, &slog.HandlerOptions{Level: slog.LevelWarn})); rt.direct == nil || strings.Contains(buf.String(), `"msg":"request"`) {
		t.Fatalf("level warn: direct %v, logged %s", rt.direct != nil, buf.String())
	}
	buf.Reset()
	if rt := run(NewLogHandler(&buf, nil)); rt.direct == nil || !strings.Contains(buf.String(), `"msg":"request"`) {
		t.Fatalf("default: direct %v, logged %s", rt.direct != nil, buf.String())
	}
	buf.Reset()
	rep := func(_ []string, a slog.Attr) slog.Attr {
		if a.Key == "replica" {
			a.Value = slog.StringValue("replaced")
		}
		return a
	}
	if rt := run(NewLogHandler(&buf, &slog.HandlerOptions{ReplaceAttr: rep})); rt.direct != nil || !strings.Contains(buf.String(), `"replica":"replaced"`) {
		t.Fatalf("ReplaceAttr: direct %v, logged %s", rt.direct != nil, buf.String())
	}
	buf.Reset()
	if rt := run(NewLogHandler(&buf, &slog.HandlerOptions{AddSource: true})); rt.direct != nil || !strings.Contains(buf.String(), `"source":`) {
		t.Fatalf("AddSource: direct %v, logged %s", rt.direct != nil, buf.String())
	}
	buf.Reset()
	if rt := run(NewLogHandler(&buf, nil).WithAttrs([]slog.Attr{slog.String("node", "a")}).WithGroup("g")); rt.direct != nil ||
		!strings.Contains(buf.String(), `"node":"a","g":{"conversation"`) {
		t.Fatalf("derived: direct %v, logged %s", rt.direct != nil, buf.String())
	}
}

// TestAppendNoteMatchesFmt: the admission note is the text fmt gave.
func TestAppendNoteMatchesFmt(t *testing.T) {
	ref := func(ad *admitted) string {
		how := "admitted at once"
		if ad.queued {
			how = fmt.Sprintf("waited %.1f ms in the queue", float64(ad.wait.Microseconds())/1000)
		}
		return fmt.Sprintf("\n  admission: band %d, flow %q: %s", ad.priority, clip(ad.flow, 64), how)
	}
	waits := []time.Duration{0, 49 * time.Microsecond, 50 * time.Microsecond, 150 * time.Microsecond, 1234567 * time.Microsecond, time.Hour}
	for i, flow := range hostile {
		for j, w := range waits {
			ad := admitted{priority: i - 3, flow: flow, queued: j > 0, wait: w}
			if got, want := string(ad.appendNote([]byte("x"))), "x"+ref(&ad); got != want {
				t.Fatalf("\n got %q\nwant %q", got, want)
			}
		}
	}
}

// TestPlainASCIIRuns: appendJSONEscaped skips plain runs 8 bytes at a
// time; any byte at any offset of a plain string of any length (so in a
// whole word, in the tail, or on a word's edge) still gives slog's escaping.
func TestPlainASCIIRuns(t *testing.T) {
	at := time.Date(2026, 12, 2, 20, 0, 0, 0, time.UTC)
	plain := "abcdefghijklmnopqrstuvwxyzABCDEFGHIJ"
	for n := 1; n <= len(plain); n++ {
		for pos := range n {
			for b := range 256 {
				s := plain[:pos] + string([]byte{byte(b)}) + plain[pos+1:n]
				fill := func(e lineEncoder) { e.str("k", s); e.text("t", []byte(s), maxTrace) }
				got, _ := direct(at, slog.LevelInfo, "m", fill)
				if want := viaSlog(at, slog.LevelInfo, "m", fill); !bytes.Equal(got, want) {
					t.Fatalf("byte %#x at %d of %d:\n got %s\nwant %s", b, pos, n, got, want)
				}
			}
		}
	}
	for _, s := range []string{"\u2028abcdefgh", "abcdefg\u2029", "abcdefgh\xff\xfeabcdefgh"} {
		fill := func(e lineEncoder) { e.str("k", s) }
		got, _ := direct(at, slog.LevelInfo, "m", fill)
		if want := viaSlog(at, slog.LevelInfo, "m", fill); !bytes.Equal(got, want) {
			t.Fatalf("%q:\n got %s\nwant %s", s, got, want)
		}
	}
}

// BenchmarkAppendJSONString: a decision trace's length of plain text, as
// the request line escapes it.
func BenchmarkAppendJSONString(b *testing.B) {
	s := strings.Repeat("cache-aware: replica 2 (load 3/8, match 0.75 of 412 tokens) ", 4)
	buf := make([]byte, 0, 1024)
	b.SetBytes(int64(len(s)))
	for b.Loop() {
		buf = appendJSONString(buf[:0], s)
	}
}
