package main

import (
	"io"
	"testing"
)

// TestSimAdmissionMapsAndStatus: --admission-set min_share=BAND:SHARE,
// flow_weight=FLOW:WEIGHT (repeatable) and shed_status; bad values are
// refused naming the key.
func TestSimAdmissionMapsAndStatus(t *testing.T) {
	o, err := parseSimFlags([]string{"--admission", "--admission-set", "min_share=0:0.2", "--admission-set", "min_share=-5:0.1", "--admission-set", "band_limit=0:0.6",
		"--admission-set", "flow_weight=t1:3", "--admission-set", "shed_status=503", "--admission-set", "tokens_per_minute=5000",
		"--admission-set", "token_share=0.45"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	s := o.admission.Settings
	if s.MinShare[0] != 0.2 || s.MinShare[-5] != 0.1 || s.BandLimits[0] != 0.6 || s.FlowWeights["t1"] != 3 || o.admission.ShedStatus != 503 || s.TokensPerMinute != 5000 || s.TokenShare != 0.45 {
		t.Fatalf("admission %+v, shed status %d", s, o.admission.ShedStatus)
	}
	for _, args := range [][]string{
		{"--admission", "--admission-set", "min_share=x:0.2"},
		{"--admission", "--admission-set", "min_share=0:0.9"}, // sums above 0.5
		{"--admission", "--admission-set", "band_limit=0:0"},
		{"--admission", "--admission-set", "band_limit=x:0.5"},
		{"--admission", "--admission-set", "flow_weight=t1"},
		{"--admission", "--admission-set", "flow_weight=t1:0"},
		{"--admission", "--admission-set", "shed_status=500"},
		{"--admission", "--admission-set", "shed_status=x"},
		{"--admission", "--admission-set", "tokens_per_minute=-1"},
		{"--admission", "--admission-set", "token_share=1.5"},
		{"--admission", "--admission-set", "token_share=x"},
	} {
		if _, err := parseSimFlags(args, io.Discard); err == nil {
			t.Errorf("%v: accepted", args)
		}
	}
}

// TestSimAdmissionFlowShare: --admission-set flow_share and flow_window.
func TestSimAdmissionFlowShare(t *testing.T) {
	o, err := parseSimFlags([]string{"--admission", "--admission-set", "flow_gate=0.4", "--admission-set", "flow_share=rate",
		"--admission-set", "flow_window=2s"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if s := o.admission.Settings; s.FlowGate != 0.4 || s.FlowShare != "rate" || s.FlowWindowNs != 2e9 {
		t.Fatalf("admission %+v", s)
	}
	for _, args := range [][]string{
		{"--admission", "--admission-set", "flow_share=work"},
		{"--admission", "--admission-set", "flow_window=x"},
		{"--admission", "--admission-set", "flow_window=-1s"},
	} {
		if _, err := parseSimFlags(args, io.Discard); err == nil {
			t.Errorf("%v: accepted", args)
		}
	}
}
