// Package config carries the shipped router configuration, router.yaml, in
// the binary, so that the tools that start a router themselves (the
// experiment runner, the simulator, the demo) use exactly the file a user
// reads and edits. Load it through internal/config.Default.
package config

import _ "embed"

// RouterYAML is config/router.yaml.
//
//go:embed router.yaml
var RouterYAML []byte
