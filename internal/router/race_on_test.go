//go:build race

package router

// raceOn: the race detector instruments allocations too (the guard's
// figures differ with it).
const raceOn = true
