package main

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
)

// A minimal GGUF (version 3) writer: metadata key-value pairs, then tensor
// infos, then the tensors' F32 data, each aligned to 32 bytes. The format
// is ggml's docs/gguf.md (github.com/ggml-org/ggml); only the value types
// the tiny model needs are written.

// GGUF value types.
const (
	ggufUint32  = 4
	ggufInt32   = 5
	ggufFloat32 = 6
	ggufBool    = 7
	ggufString  = 8
	ggufArray   = 9
)

const ggufAlignment = 32

// kv is one metadata pair; Value is uint32, int32, float32, bool, string,
// []string or []int32.
type kv struct {
	Key   string
	Value any
}

// tensor is one F32 tensor: Dims in ggml's order (the fastest-varying
// dimension first), Data of their product's length.
type tensor struct {
	Name string
	Dims []uint64
	Data []float32
}

// ggufWriter writes little-endian GGUF and remembers the first error.
type ggufWriter struct {
	w   *bufio.Writer
	n   int64
	err error
}

func (g *ggufWriter) put(v any) {
	if g.err != nil {
		return
	}
	g.err = binary.Write(g.w, binary.LittleEndian, v)
	g.n += int64(binary.Size(v))
}

func (g *ggufWriter) str(s string) {
	g.put(uint64(len(s)))
	if g.err == nil {
		var n int
		n, g.err = g.w.WriteString(s)
		g.n += int64(n)
	}
}

func (g *ggufWriter) pad() {
	for g.n%ggufAlignment != 0 && g.err == nil {
		g.put(uint8(0))
	}
}

// value writes one metadata value with its type.
func (g *ggufWriter) value(v any) error {
	switch x := v.(type) {
	case uint32:
		g.put(uint32(ggufUint32))
		g.put(x)
	case int32:
		g.put(uint32(ggufInt32))
		g.put(x)
	case float32:
		g.put(uint32(ggufFloat32))
		g.put(x)
	case bool:
		g.put(uint32(ggufBool))
		g.put(x)
	case string:
		g.put(uint32(ggufString))
		g.str(x)
	case []string:
		g.put(uint32(ggufArray))
		g.put(uint32(ggufString))
		g.put(uint64(len(x)))
		for _, s := range x {
			g.str(s)
		}
	case []int32:
		g.put(uint32(ggufArray))
		g.put(uint32(ggufInt32))
		g.put(uint64(len(x)))
		g.put(x)
	default:
		return fmt.Errorf("gguf: unsupported value type %T", v)
	}
	return nil
}

// writeGGUF writes a whole GGUF file of kvs and tensors to w.
func writeGGUF(w io.Writer, kvs []kv, ts []tensor) error {
	g := &ggufWriter{w: bufio.NewWriter(w)}
	g.put([4]byte{'G', 'G', 'U', 'F'})
	g.put(uint32(3))
	g.put(uint64(len(ts)))
	g.put(uint64(len(kvs)))
	for _, p := range kvs {
		g.str(p.Key)
		if err := g.value(p.Value); err != nil {
			return err
		}
	}
	var offset uint64
	for _, t := range ts {
		n := uint64(1)
		for _, d := range t.Dims {
			n *= d
		}
		if n != uint64(len(t.Data)) {
			return fmt.Errorf("gguf: tensor %s: dims %v hold %d values, data has %d", t.Name, t.Dims, n, len(t.Data))
		}
		g.str(t.Name)
		g.put(uint32(len(t.Dims)))
		g.put(t.Dims)
		g.put(uint32(0)) // GGML_TYPE_F32
		g.put(offset)
		offset += (4*n + ggufAlignment - 1) / ggufAlignment * ggufAlignment
	}
	g.pad()
	for _, t := range ts {
		g.put(t.Data)
		g.pad()
	}
	if g.err != nil {
		return g.err
	}
	return g.w.Flush()
}
