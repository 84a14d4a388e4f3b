package config

import (
	"reflect"
	"testing"
)

func TestShippedExampleIsValid(t *testing.T) {
	c, err := Load("../../config/router.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if c.Policy != "llm-aware" || len(c.Discovery.Static) != 3 {
		t.Fatalf("unexpected example contents: %+v", c)
	}
}

func TestDefaultIsTheShippedFile(t *testing.T) {
	d, err := Default()
	if err != nil {
		t.Fatal(err)
	}
	f, err := Load("../../config/router.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(d, f) {
		t.Errorf("Default() = %+v, want the file's %+v", d, f)
	}
}
