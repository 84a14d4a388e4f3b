// Package strict decodes YAML (or JSON) documents strictly: an unknown key, a
// key of the wrong type and a missing key are each an error that names the
// key. It is a leaf: it imports nothing of llm-ring, so that the router's
// configuration (internal/config) and the traffic profiles (internal/traffic)
// share one decoder without one depending on the other.
//
// Every field of the target struct is required except those tagged
// cfg:"optional", and those tagged cfg:"mode=X", which are required exactly
// when the sibling "mode" key equals X. Keys are checked in field order, then
// unknown keys in sorted order, so the error for a document is deterministic.
package strict

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"time"

	"sigs.k8s.io/yaml"
)

// Hook checks a value of a type its caller knows better than the generic
// walk (a duration string, a document whose keys moved). It is called for
// every value the walk reaches, with the key's path ("" for the document);
// handled stops the walk at that value, a non-nil error ends the decoding.
type Hook func(raw any, t reflect.Type, path string) (handled bool, err error)

// Decode decodes data into v, a pointer to a struct. hook may be nil.
func Decode(data []byte, v any, hook Hook) error {
	js, err := yaml.YAMLToJSON(data)
	if err != nil {
		return fmt.Errorf("invalid YAML: %w", err)
	}
	var raw any
	if err := json.Unmarshal(js, &raw); err != nil {
		return fmt.Errorf("invalid YAML: %w", err)
	}
	if _, ok := raw.(map[string]any); !ok {
		return errors.New("the document must be a mapping of keys")
	}
	w := walker{hook: hook}
	if err := w.check(raw, reflect.TypeOf(v).Elem(), ""); err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(js))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return decodeError(err)
	}
	return nil
}

// Join returns the path of key name under path ("a.b" under "a").
func Join(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}

// decodeError rewrites encoding/json errors so that they name the key.
func decodeError(err error) error {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		return fmt.Errorf("%s: must be %s, not %s", te.Field, kindName(te.Type), te.Value)
	}
	msg := err.Error()
	if k, ok := strings.CutPrefix(msg, "json: unknown field "); ok {
		return fmt.Errorf("%s: unknown key", strings.Trim(k, `"`))
	}
	if i := strings.Index(msg, "json: cannot unmarshal"); i >= 0 {
		return errors.New(msg[i+len("json: "):])
	}
	return err
}

func kindName(t reflect.Type) string {
	switch t.Kind() {
	case reflect.Bool:
		return "true or false"
	case reflect.Int, reflect.Int32, reflect.Int64:
		return "an integer"
	case reflect.Float64:
		return "a number"
	case reflect.String:
		return "a string"
	case reflect.Slice:
		return "a list"
	case reflect.Struct, reflect.Map:
		return "a mapping"
	}
	return t.String()
}

// walker checks a decoded document against a type: the first missing or
// unknown key is the error.
type walker struct{ hook Hook }

func (w walker) check(raw any, t reflect.Type, path string) error {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t.Kind() == reflect.Slice {
		list, ok := raw.([]any)
		if !ok {
			return nil // the decoder names the type error
		}
		for i, it := range list {
			if err := w.check(it, t.Elem(), fmt.Sprintf("%s[%d]", path, i)); err != nil {
				return err
			}
		}
		return nil
	}
	if w.hook != nil {
		if handled, err := w.hook(raw, t, path); handled || err != nil {
			return err
		}
	}
	if t.Kind() != reflect.Struct {
		return nil
	}
	m, ok := raw.(map[string]any)
	if !ok {
		if raw == nil {
			return fmt.Errorf("%s: must be a mapping, not empty", strings.TrimPrefix(path, "."))
		}
		return nil
	}
	known, err := w.fields(m, t, path)
	if err != nil {
		return err
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		if !known[k] {
			return fmt.Errorf("%s: unknown key", Join(path, k))
		}
	}
	return nil
}

// fields checks m's keys against struct t's fields in field order and
// returns the keys t knows.
func (w walker) fields(m map[string]any, t reflect.Type, path string) (map[string]bool, error) {
	known := map[string]bool{}
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "" || name == "-" {
			continue
		}
		known[name] = true
		key := Join(path, name)
		val, present := m[name]
		required := true
		switch tag := f.Tag.Get("cfg"); {
		case tag == "optional":
			required = false
		case strings.HasPrefix(tag, "mode="):
			mode, _ := m["mode"].(string)
			required = mode == strings.TrimPrefix(tag, "mode=")
		}
		if !present {
			if required {
				return nil, fmt.Errorf("%s: missing", key)
			}
			continue
		}
		if err := w.check(val, f.Type, key); err != nil {
			return nil, err
		}
	}
	return known, nil
}

// Required returns the keys of struct s that every document must give
// (fields tagged cfg:"optional" or cfg:"mode=X" left out), by their JSON
// names, with s's values: what a record writes of a decoded document, named
// as the document names it. A time.Duration is written as its String
// ("19ms"), as a document gives one. s is a struct value; any other kind
// panics.
func Required(s any) map[string]any { return record(s, false) }

// Fields is Required with the optional fields that are set (not their zero
// value, which a document may leave out): a record of all a run was
// configured with that stays the same when a newer optional key is unset.
func Fields(s any) map[string]any { return record(s, true) }

func record(s any, optional bool) map[string]any {
	v := reflect.ValueOf(s)
	t := v.Type()
	out := make(map[string]any, t.NumField())
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "" || name == "-" {
			continue
		}
		if f.Tag.Get("cfg") != "" && (!optional || v.Field(i).IsZero()) {
			continue
		}
		val := v.Field(i).Interface()
		if d, ok := val.(time.Duration); ok {
			val = d.String()
		}
		out[name] = val
	}
	return out
}
