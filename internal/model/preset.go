package model

import "time"

// WithSpeed returns c on hardware speed times as fast: every step cost
// (StepOverhead, TokenCost, AttnCost and their prefill counterparts) is
// divided by speed, so 0.5 is a replica at half speed, each step taking
// twice as long. WithSpeed(1) returns c unchanged. speed must be positive.
func (c Config) WithSpeed(speed float64) Config {
	if speed == 1 {
		return c
	}
	scale := func(d time.Duration) time.Duration { return time.Duration(float64(d) / speed) }
	c.StepOverhead = scale(c.StepOverhead)
	c.TokenCost = scale(c.TokenCost)
	c.AttnCost = scale(c.AttnCost)
	return c
}
