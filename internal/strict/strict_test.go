package strict

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"
)

type inner struct {
	Mode string `json:"mode"`
	Path string `json:"path" cfg:"mode=file"`
}

type doc struct {
	Name  string  `json:"name"`
	Note  string  `json:"note" cfg:"optional"`
	Size  int     `json:"size"`
	Inner inner   `json:"inner"`
	List  []inner `json:"list" cfg:"optional"`
}

func TestDecode(t *testing.T) {
	tests := []struct{ in, errHas string }{
		{"name: a\nsize: 1\ninner: {mode: none}\n", ""},
		{"name: a\nsize: 1\ninner: {mode: file, path: x}\nnote: hello\n", ""},
		{"size: 1\ninner: {mode: none}\n", "name: missing"},
		{"name: a\nsize: 1\ninner: {mode: file}\n", "inner.path: missing"},
		{"name: a\nsize: 1\ninner: {mode: none}\nextra: 1\n", "extra: unknown key"},
		{"name: a\nsize: x\ninner: {mode: none}\n", "size: must be an integer, not string"},
		{"name: a\nsize: 1\ninner:\n", "inner: must be a mapping, not empty"},
		{"name: a\nsize: 1\ninner: {mode: none}\nlist: [{mode: file}]\n", "list[0].path: missing"},
		{"- 1\n", "the document must be a mapping"},
		{"a: [\n", "invalid YAML"},
	}
	for _, tt := range tests {
		var d doc
		err := Decode([]byte(tt.in), &d, nil)
		if tt.errHas == "" && err != nil || tt.errHas != "" && (err == nil || !strings.Contains(err.Error(), tt.errHas)) {
			t.Errorf("Decode(%q) = %v, want an error containing %q", tt.in, err, tt.errHas)
		}
	}
}

// A hook sees every value with its path and can end the decoding.
func TestHook(t *testing.T) {
	var paths []string
	hook := func(raw any, typ reflect.Type, path string) (bool, error) {
		paths = append(paths, path)
		if typ == reflect.TypeOf(inner{}) {
			return true, errors.New(path + ": refused")
		}
		return false, nil
	}
	var d doc
	err := Decode([]byte("name: a\nsize: 1\ninner: {mode: none}\n"), &d, hook)
	if err == nil || err.Error() != "inner: refused" {
		t.Fatalf("error %v, want the hook's", err)
	}
	if want := []string{"", "name", "size", "inner"}; !reflect.DeepEqual(paths, want) {
		t.Errorf("hook saw %q, want %q", paths, want)
	}
}

func TestRequired(t *testing.T) {
	type doc struct {
		Name  string  `json:"name"`
		Share float64 `json:"share,omitempty"`
		Note  string  `json:"note" cfg:"optional"`
		Peers int     `json:"peers" cfg:"mode=static"`
		Skip  int     `json:"-"`
		Bare  int
		Step  time.Duration `json:"step"`
	}
	d := doc{Name: "a", Share: 0.5, Note: "n", Peers: 2, Skip: 3, Bare: 4, Step: 12700 * time.Microsecond}
	got := Required(d)
	want := map[string]any{"name": "a", "share": 0.5, "step": "12.7ms"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Required = %v, want %v", got, want)
	}
	d.Peers = 0 // an unset optional key is left out
	got = Fields(d)
	want["note"] = "n"
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Fields = %v, want %v", got, want)
	}
}
