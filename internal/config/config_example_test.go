package config

import "testing"

func TestShippedExampleIsValid(t *testing.T) {
	c, err := Load("../../config/router.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if c.Policy != "llm-aware" || len(c.Discovery.Static) != 3 {
		t.Fatalf("unexpected example contents: %+v", c)
	}
}
