package main

import (
	"errors"
	"flag"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/llm-ring/llm-ring/internal/admission"
	"github.com/llm-ring/llm-ring/internal/sim"
)

// admissionFlags are the admission flags of llm-ring sim (issue 22).
type admissionFlags struct {
	on                    *bool
	set                   settingList
	highShare, floodShare *float64
	highPriority, tenants *int
}

// settingList is a repeatable KEY=VALUE flag.
type settingList []string

func (l *settingList) String() string     { return strings.Join(*l, ",") }
func (l *settingList) Set(v string) error { *l = append(*l, v); return nil }

func defineAdmissionFlags(fs *flag.FlagSet) *admissionFlags {
	a := &admissionFlags{
		on: fs.Bool("admission", false, "admission control in front of routing (docs/admission.md): "+
			"requests wait in the router while the pool is saturated, shed ones end with 429; deadlines from --slo-ttft"),
		highShare:    fs.Float64("admission-high-share", 0, "with --admission: share of conversations in the top band"),
		highPriority: fs.Int("admission-high-priority", 10, "with --admission: the top band's priority (the others: 0)"),
		tenants:      fs.Int("admission-tenants", 1, "with --admission: flows (tenants) t0 … tN-1, conversations spread evenly"),
		floodShare:   fs.Float64("admission-flood-share", 0, "with --admission: share of conversations that flow t0 (the flooder) sends on top"),
	}
	fs.Var(&a.set, "admission-set", "with --admission: KEY=VALUE, repeatable: queue_capacity, queue_threshold, "+
		"kv_threshold, token_capacity, token_share, work_share, work_model (charges|inflight|backlog|prefill), work_cached (expect|match|min), work_target, decode_share, decode_quantile, limit, work_limit, max_wait and service_floor (durations), order (fcfs|edf), shed_status (429|503), "+
		"min_share=BAND:SHARE, band_limit=BAND:LIMIT and flow_weight=FLOW:WEIGHT (repeatable), tokens_per_minute (every flow's budget), service_quantile, flow_gate, flow_share (inflight|rate), flow_window (a duration)")
	return a
}

// apply builds o.admission (nil without --admission).
func (a *admissionFlags) apply(o *simOptions, set map[string]bool) error {
	if !*a.on {
		for _, n := range []string{"admission-set", "admission-high-share", "admission-high-priority", "admission-tenants", "admission-flood-share"} {
			if set[n] {
				return fmt.Errorf("--%s: only with --admission", n)
			}
		}
		return nil
	}
	if o.routers > 1 {
		return errors.New("--admission: needs one router instance (--routers 1)")
	}
	st := admission.Defaults()
	st.Enabled = true
	shedStatus := 0
	for _, kv := range a.set {
		if v, ok := strings.CutPrefix(kv, "shed_status="); ok {
			n, err := strconv.Atoi(v)
			if err != nil {
				return fmt.Errorf("--admission-set %s: shed_status: %q is not a valid value", kv, v)
			}
			shedStatus = n
			continue
		}
		if err := setAdmission(&st, kv); err != nil {
			return fmt.Errorf("--admission-set %s: %w", kv, err)
		}
	}
	adm := &sim.Admission{Settings: st, SLOTTFT: time.Duration(o.slo.TTFTMS * 1e6), SLOTPOT: time.Duration(o.slo.TPOTMS * 1e6), HighShare: *a.highShare,
		HighPriority: *a.highPriority, Tenants: *a.tenants, FloodShare: *a.floodShare, ShedStatus: shedStatus}
	if err := adm.Validate(); err != nil {
		return err
	}
	o.admission = adm
	return nil
}

// setAdmission sets one KEY=VALUE of st.
func setAdmission(st *admission.Settings, kv string) error {
	k, v, ok := strings.Cut(kv, "=")
	if !ok {
		return errors.New("want KEY=VALUE")
	}
	f := func() (float64, error) { return strconv.ParseFloat(v, 64) }
	var err error
	switch k {
	case "queue_capacity":
		st.QueueCapacity, err = strconv.Atoi(v)
	case "queue_threshold":
		st.QueueThreshold, err = f()
	case "kv_threshold":
		st.KVThreshold, err = f()
	case "limit":
		st.Limit, err = f()
	case "token_capacity":
		st.TokenCapacity, err = strconv.ParseInt(v, 10, 64)
	case "token_share":
		st.TokenShare, err = f()
	case "work_share":
		st.WorkShare, err = f()
	case "work_model":
		st.WorkModel = v
	case "work_cached":
		st.WorkCached = v
	case "work_target":
		st.WorkTarget, err = f()
	case "decode_share":
		st.DecodeShare, err = f()
	case "decode_quantile":
		st.DecodeQuantile, err = f()
	case "work_limit":
		var d time.Duration
		d, err = time.ParseDuration(v)
		st.WorkLimitNs = int64(d)
	case "service_quantile":
		st.ServiceQuantile, err = f()
	case "flow_gate":
		st.FlowGate, err = f()
	case "flow_share":
		st.FlowShare = v
	case "flow_window":
		var d time.Duration
		d, err = time.ParseDuration(v)
		st.FlowWindowNs = int64(d)
	case "tokens_per_minute": // every flow's budget
		st.TokensPerMinute, err = strconv.ParseInt(v, 10, 64)
	case "max_wait":
		var d time.Duration
		d, err = time.ParseDuration(v)
		st.MaxWaitNs = int64(d)
	case "service_floor":
		var d time.Duration
		d, err = time.ParseDuration(v)
		st.ServiceFloorNs = int64(d)
	case "order":
		st.Order = v
	case "min_share", "band_limit", "flow_weight": // BAND:SHARE, BAND:LIMIT, FLOW:WEIGHT (repeatable)
		return setAdmissionMap(st, k, v)
	default:
		return fmt.Errorf("unknown key %q (want queue_capacity, queue_threshold, kv_threshold, limit, token_capacity, token_share, work_share, work_model, work_cached, work_target, decode_share, decode_quantile, work_limit, max_wait, service_floor, order, shed_status, min_share, band_limit, flow_weight, tokens_per_minute, service_quantile, flow_gate, flow_share or flow_window)", k)
	}
	if err != nil {
		return fmt.Errorf("%s: %q is not a valid value", k, v)
	}
	return nil
}

// setAdmissionMap sets one entry of st's MinShare (v = BAND:SHARE),
// BandLimits (v = BAND:LIMIT) or FlowWeights (v = FLOW:WEIGHT); ranges are checked by Settings.Validate.
func setAdmissionMap(st *admission.Settings, k, v string) error {
	name, val, ok := strings.Cut(v, ":")
	x, err := strconv.ParseFloat(val, 64)
	if !ok || err != nil {
		return fmt.Errorf("%s: %q is not KEY:NUMBER", k, v)
	}
	if k == "flow_weight" {
		if st.FlowWeights == nil {
			st.FlowWeights = map[string]float64{}
		}
		st.FlowWeights[name] = x
		return nil
	}
	band, err := strconv.Atoi(name)
	if err != nil {
		return fmt.Errorf("%s: band %q is not an integer", k, name)
	}
	m := &st.MinShare
	if k == "band_limit" {
		m = &st.BandLimits
	}
	if *m == nil {
		*m = map[int]float64{}
	}
	(*m)[band] = x
	return nil
}
