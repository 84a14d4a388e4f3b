// Package rules holds the test of the repository's rules for Go code: no
// function over 80 lines and no file over 600 lines outside tests, and the
// core packages neither reach files nor import networking. It has no code of
// its own; see rules_test.go.
package rules
