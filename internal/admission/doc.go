// Package admission decides, in front of the routing step, whether a request
// goes to a replica now, waits in the router, or is refused. It is pure core
// code: no clock, no I/O, no goroutines; time comes in as an argument (ns on
// the driver's clock), so the live router and the simulator drive the very
// same Controller and measure the same behaviour.
//
// Three parts, each usable alone:
//
//   - Saturation (saturation.go): a score per replica and for the pool, read
//     from the routing view: max(waiting / queue threshold, KV use / KV
//     threshold, in-flight tokens / token capacity). A replica whose reports
//     have gone stale counts as saturated, as the Gateway API Inference
//     Extension's utilization detector does (field-notes §1.6). The pool is
//     saturated when the mean score reaches the limit.
//   - The queue (queue.go): bounded, ordered by priority band (strictly
//     higher bands first, lower bands guaranteed a configured minimum share
//     of dispatches so they are not starved), fair between flows within a
//     band (start-time fair queuing by weight: equal weights are round
//     robin), FCFS or earliest deadline within a flow. Requests leave it by
//     exactly one of: dispatched, shed (queue full, deadline unmeetable,
//     timed out, displaced by a higher band) or cancelled.
//   - Token budgets (budget.go): an optional tokens-per-minute bucket per
//     flow, charged on admission with the estimate and corrected with the
//     counts the answer reports.
//
// A Controller is not safe for concurrent use: its driver serialises calls
// (the router under one mutex, the simulator on its event loop).
package admission
