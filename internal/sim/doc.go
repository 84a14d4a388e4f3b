// Package sim is llm-ring's discrete-event simulator: the virtual-time
// driver of the same core the live router drives. Each run replays a
// traffic profile (internal/traffic) with closed-loop users, routes every
// turn through a state.Table (the very same policy Pick, load accounting and
// placement memory as the router), and serves it with the replica model
// (internal/model: slots, prompt cache, continuous batching, shared CPU),
// all on one goroutine, with no clock, no I/O and no HTTP on the path.
//
// Events wait in a heap ordered by (virtual time, push order): a user's
// send after its think time, a replica group's next model event, the
// scale-up's start and readiness. A run writes the records of a live run
// (internal/record: one CSV row per request, one JSON per run, mode "sim"),
// so `llm-ring analyze` reads both alike and runs of the same seed compare
// row by row.
//
// One run:
//
//	spec := sim.Spec{
//		RunID: "s1-llm-aware-sim", Policy: "llm-aware", Seed: 1,
//		Profile: prof, // traffic.LoadProfile("standard")
//		Replicas: 3, Model: model.DefaultConfig(), SharedCPU: true,
//		Router: sim.DefaultRouter(),
//	}
//	res, err := sim.Run(ctx, spec, rowWriter) // rows in the order requests end
//
// Many runs, in parallel (each run stays single-threaded and deterministic),
// writing <dir>/<run_id>.csv and .json:
//
//	results, err := sim.RunAll(ctx, dir, specs, sim.BatchOptions{})
//
// Policy names may be variants for ablations (llm-aware-no-memory, ...; see
// PolicyNames). Design, formulas and limits: docs/simulator.md;
// measurements: docs/notes/simulator.md.
package sim
