// Package experiment is the live experiment runner behind "llm-ring run" and
// "llm-ring demo": it replays the same conversations (internal/traffic)
// through a router under each policy, optionally adds a replica mid-run, and
// records every request (internal/record) for the analysis.
//
// A Spec says what to run; Plan orders the runs (seed by seed, the policies
// in the given order, reversed on every other seed with Alternate); Run
// executes them:
//
//	spec := experiment.Spec{
//		Policies: []string{"bounded", "llm-aware"},
//		Seeds:    []int64{1, 2, 3},
//		Profile:  p, // traffic.LoadProfile("standard")
//		Replicas: 3,
//		Speed:    50,
//		OutDir:   "results/raw-main",
//	}
//	results, err := experiment.Run(ctx, spec)
//
// Two targets carry the traffic. Embedded (the default): for every run, fresh
// simulated replicas (one replica.Host, on 127.0.0.1:0 listeners) and a fresh
// in-process router in front of them. External (Spec.RouterURL): an existing
// router, whose policy is switched before each run with PUT /admin/policy
// {"policy": …, "reset": true}, and whose extra replica is added and removed
// by shell commands (Spec.ScaleCmd, Spec.UnscaleCmd).
//
// Users form a closed loop: user u runs conversations u, u+C, u+2C, … (C =
// the profile's concurrency) one after another, turn by turn, waiting each
// turn's think time first, sending the whole conversation so far with the
// replica's real previous answers, and ending a conversation early when its
// next turn would not fit the context budget (traffic.Fits) or a turn failed
// (its answer, which the next turn must resend, is missing).
//
// Times in the records are model time: wall durations multiplied by
// Spec.Speed, the replicas' speed-up, so that live and simulated runs compare
// directly. Ctrl-C (ctx cancelled) stops the runner cleanly: the run in
// progress is written with the rows recorded so far, its JSON says
// "interrupted": true, and Run returns ErrInterrupted.
package experiment
