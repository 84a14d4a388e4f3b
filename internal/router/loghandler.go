package router

import (
	"io"
	"log/slog"
	"math"
	"strconv"
	"sync"
	"time"
	"unicode/utf8"
)

// NewLogHandler is slog's JSONHandler on w with opts, with one direct path
// (issue 21): the router's per-request line (finish, logline.go) is
// appended as a JSON object into a pooled buffer and written with one
// Write, the bytes the JSONHandler writes for the same record
// (TestRequestLineMatchesJSONHandler, FuzzJSONLine), without building a
// slog.Record, its attributes or its caller's frame. Every other record
// goes through the JSONHandler.
//
// opts.Level is honoured on both paths (the router asks Enabled first).
// The direct path is off when opts has a ReplaceAttr or AddSource, and on
// a handler derived with WithAttrs or WithGroup: then the request line is
// a slog record like any other.
func NewLogHandler(w io.Writer, opts *slog.HandlerOptions) slog.Handler {
	lw := &lockedWriter{w: w}
	direct := opts == nil || opts.ReplaceAttr == nil && !opts.AddSource
	return &logHandler{Handler: slog.NewJSONHandler(lw, opts), w: lw, direct: direct}
}

// logHandler is NewLogHandler's handler: the JSONHandler, and the writer
// both it and the direct path write through.
type logHandler struct {
	slog.Handler
	w      *lockedWriter
	direct bool // lines may be written directly (no ReplaceAttr, AddSource or With state)
}

func (h *logHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return &logHandler{Handler: h.Handler.WithAttrs(as), w: h.w}
}

func (h *logHandler) WithGroup(name string) slog.Handler {
	return &logHandler{Handler: h.Handler.WithGroup(name), w: h.w}
}

// directLog is the handler of log when the request line may be written
// directly, nil when it goes through slog.
func directLog(log *slog.Logger) *logHandler {
	if h, ok := log.Handler().(*logHandler); ok && h.direct {
		return h
	}
	return nil
}

// lockedWriter serializes the JSONHandler's writes (under its own lock)
// with the direct path's: one line per Write, never interleaved. When
// buffered (NewBufferedLogHandler, logbuffer.go) the direct path's lines
// wait in buf, and a JSONHandler line is written after them, at once.
type lockedWriter struct {
	mu       sync.Mutex
	w        io.Writer
	buffered bool       // set before the handler is used
	buf      []byte     // request lines not yet written (buffered)
	spare    []byte     // the other buffer, while none is being written
	out      sync.Mutex // held while buf's lines are written: writes in order
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	if l.buffered {
		l.mu.Lock()
		l.buf = append(l.buf, p...)
		l.writeOutLocked()
		return len(p), nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// lineEncoder takes a log line's fields in order: jsonLine appends them as
// JSON, attrLine as slog attributes. requestFields (logline.go) is the one
// list of the request line's fields both are made from.
type lineEncoder interface {
	str(key, v string)
	int(key string, v int64)
	bool(key string, v bool)
	float(key string, v float64)
	hex(key string, v uint64)         // 16 lowercase hex digits
	text(key string, v []byte, n int) // v as a string, clipped to n bytes as clipText does
}

// jsonLine is a log line appended as the JSONHandler writes it (no
// ReplaceAttr, no groups): `{"time":…,"level":…,"msg":…,fields…}` and a
// newline. ok turns false on a value the direct path does not write as
// json.Marshal would (a NaN or infinite float, a year outside 0–9999):
// then the line goes through slog instead.
type jsonLine struct {
	b  []byte
	ok bool
}

var jsonLines = sync.Pool{New: func() any { return &jsonLine{b: make([]byte, 0, 4<<10)} }}

// begin starts the line with the record's built-in fields.
func (j *jsonLine) begin(t time.Time, level slog.Level, msg string) {
	j.ok = true
	if y := t.Year(); y < 0 || y >= 10000 {
		j.ok = false
	}
	j.b = append(j.b[:0], `{"time":"`...)
	j.b = t.AppendFormat(j.b, time.RFC3339Nano)
	j.b = append(j.b, `","level":`...)
	j.b = appendJSONString(j.b, level.String())
	j.b = append(j.b, `,"msg":`...)
	j.b = appendJSONString(j.b, msg)
}

// end closes the line.
func (j *jsonLine) end() { j.b = append(j.b, "}\n"...) }

func (j *jsonLine) key(k string) {
	j.b = append(j.b, ',')
	j.b = appendJSONString(j.b, k)
	j.b = append(j.b, ':')
}

func (j *jsonLine) str(k, v string) { j.key(k); j.b = appendJSONString(j.b, v) }

func (j *jsonLine) int(k string, v int64) { j.key(k); j.b = strconv.AppendInt(j.b, v, 10) }

func (j *jsonLine) bool(k string, v bool) { j.key(k); j.b = strconv.AppendBool(j.b, v) }

func (j *jsonLine) float(k string, v float64) {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		j.ok = false // json.Marshal refuses it; slog writes its error
		return
	}
	j.key(k)
	j.b = appendJSONFloat(j.b, v)
}

func (j *jsonLine) hex(k string, v uint64) {
	j.key(k)
	j.b = append(j.b, '"')
	j.b = appendHex16(j.b, v)
	j.b = append(j.b, '"')
}

func (j *jsonLine) text(k string, v []byte, n int) {
	j.key(k)
	j.b = append(j.b, '"')
	if len(v) <= n {
		j.b = appendJSONEscaped(j.b, v)
	} else {
		j.b = appendJSONEscaped(j.b, v[:n])
		j.b = append(j.b, "…"...)
	}
	j.b = append(j.b, '"')
}

// attrLine is a log line's fields as slog attributes (the path through
// slog.Logger.LogAttrs).
type attrLine struct{ a []slog.Attr }

func (l *attrLine) str(k, v string)           { l.a = append(l.a, slog.String(k, v)) }
func (l *attrLine) int(k string, v int64)     { l.a = append(l.a, slog.Int64(k, v)) }
func (l *attrLine) bool(k string, v bool)     { l.a = append(l.a, slog.Bool(k, v)) }
func (l *attrLine) float(k string, v float64) { l.a = append(l.a, slog.Float64(k, v)) }
func (l *attrLine) hex(k string, v uint64) {
	l.a = append(l.a, slog.String(k, string(appendHex16(nil, v))))
}
func (l *attrLine) text(k string, v []byte, n int) { l.a = append(l.a, slog.String(k, clipText(v, n))) }

// appendHex16 appends v as 16 lowercase hex digits.
func appendHex16(dst []byte, v uint64) []byte {
	var b [16]byte
	for i := len(b) - 1; i >= 0; i-- {
		b[i] = "0123456789abcdef"[v&15]
		v >>= 4
	}
	return append(dst, b[:]...)
}

// appendJSONString appends s quoted as slog's JSONHandler quotes a string.
func appendJSONString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	dst = appendJSONEscaped(dst, s)
	return append(dst, '"')
}

// appendJSONEscaped appends s escaped as the JSONHandler escapes a string's
// contents: `"` and `\` with a backslash, \n \r \t by name, the other
// bytes below 0x20 as \u00XX, each byte of an invalid UTF-8 sequence as
// \ufffd, U+2028 and U+2029 as \u2028 and \u2029; everything else (HTML's
// < > & included) as it is.
func appendJSONEscaped[S string | []byte](dst []byte, s S) []byte {
	start := 0
	for i := 0; i < len(s); {
		if i += plainASCII(s[i:]); i >= len(s) {
			break
		}
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch c {
			case '"', '\\':
				dst = append(dst, '\\', c)
			case '\n':
				dst = append(dst, `\n`...)
			case '\r':
				dst = append(dst, `\r`...)
			case '\t':
				dst = append(dst, `\t`...)
			default:
				dst = append(dst, '\\', 'u', '0', '0', "0123456789abcdef"[c>>4], "0123456789abcdef"[c&15])
			}
			i++
			start = i
			continue
		}
		// A rune is at most 4 bytes: the conversion of a []byte that short
		// is made on the stack.
		r, size := utf8.DecodeRuneInString(string(s[i:min(i+utf8.UTFMax, len(s))]))
		switch {
		case r == utf8.RuneError && size == 1:
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
		case r == '\u2028' || r == '\u2029':
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\u202`...)
			dst = append(dst, "0123456789abcdef"[r&15])
		default:
			i += size
			continue
		}
		i += size
		start = i
	}
	return append(dst, s[start:]...)
}

// plainASCII is how many bytes at s's start, in whole words of 8, are
// ASCII that needs no escaping in JSON (no quote, backslash, control or
// non-ASCII byte): the run appendJSONEscaped copies as it is.
func plainASCII[S string | []byte](s S) int {
	i := 0
	for ; i+8 <= len(s); i += 8 {
		x := uint64(s[i]) | uint64(s[i+1])<<8 | uint64(s[i+2])<<16 | uint64(s[i+3])<<24 |
			uint64(s[i+4])<<32 | uint64(s[i+5])<<40 | uint64(s[i+6])<<48 | uint64(s[i+7])<<56
		if specialBytes(x)|x&swarHigh != 0 { // and no byte at or above 0x80
			break
		}
	}
	return i
}

// appendJSONFloat appends a finite f as encoding/json writes a float64
// (which the JSONHandler calls for floats): the shortest decimal that reads
// back as f, in %f form but for magnitudes below 1e-6 or from 1e21, which
// take an exponent without a leading zero (1e-7, not 1e-07).
func appendJSONFloat(dst []byte, f float64) []byte {
	abs := math.Abs(f)
	if abs == 0 || abs >= 1e-6 && abs < 1e21 {
		return strconv.AppendFloat(dst, f, 'f', -1, 64)
	}
	dst = strconv.AppendFloat(dst, f, 'e', -1, 64)
	if n := len(dst); n >= 4 && dst[n-4] == 'e' && dst[n-3] == '-' && dst[n-2] == '0' {
		dst[n-2] = dst[n-1]
		dst = dst[:n-1]
	}
	return dst
}
