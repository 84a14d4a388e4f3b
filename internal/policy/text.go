package policy

import "strconv"

// text is a trace being written: each method appends one piece with the
// formatting the trace text has always used (the fmt verb each replaces is
// in its doc) and returns the longer slice, so that writing a whole trace
// into a buffer with room allocates nothing. TestTextMatchesFmt checks each
// against fmt.
type text []byte

// s appends a string (%s).
func (w text) s(x string) text { return append(w, x...) }

// i appends an int (%d).
func (w text) i(x int) text { return strconv.AppendInt(w, int64(x), 10) }

// d appends an int64 (%d).
func (w text) d(x int64) text { return strconv.AppendInt(w, x, 10) }

// u appends a uint64 (%d).
func (w text) u(x uint64) text { return strconv.AppendUint(w, x, 10) }

// f appends a float with prec digits after the point (%.<prec>f).
func (w text) f(x float64, prec int) text { return strconv.AppendFloat(w, x, 'f', prec, 64) }

// g appends a float in its shortest form (%g, %v).
func (w text) g(x float64) text { return strconv.AppendFloat(w, x, 'g', -1, 64) }

// t appends a bool (%t).
func (w text) t(x bool) text { return strconv.AppendBool(w, x) }

// hex16 appends x as 16 lower-case hex digits, zero-padded (%016x).
func (w text) hex16(x uint64) text {
	const digits = "0123456789abcdef"
	for shift := 60; shift >= 0; shift -= 4 {
		w = append(w, digits[x>>uint(shift)&0xf])
	}
	return w
}

// name appends replica r's name, or "#r" when r is not a replica of the
// trace's view (Trace.name).
func (w text) name(t *Trace, r int) text {
	if r >= 0 && r < len(t.Names) {
		return append(w, t.Names[r]...)
	}
	return w.s("#").i(r)
}
