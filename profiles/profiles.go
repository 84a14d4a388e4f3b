// Package profiles carries the shipped traffic profiles (the *.json files of
// this directory) inside the binary, so "--profile quick" works anywhere.
// internal/traffic parses them; this package only holds the bytes.
package profiles

import (
	"embed"
	"io/fs"
	"path"
	"slices"
	"strings"
)

//go:embed *.json
var files embed.FS // read-only

// Names returns the names of the embedded profiles (file names without
// ".json"), sorted.
func Names() []string { return names(files, ".") }

// Read returns the JSON of the embedded profile name ("quick", not
// "quick.json"), or false if there is none.
func Read(name string) ([]byte, bool) { return read(files, ".", name) }

//go:embed workloads/*.json
var workloads embed.FS // read-only

// WorkloadNames returns the names of the embedded open-loop workloads
// (workloads/*.json without ".json"), sorted.
func WorkloadNames() []string { return names(workloads, "workloads") }

// ReadWorkload returns the JSON of the embedded workload name, or false.
func ReadWorkload(name string) ([]byte, bool) { return read(workloads, "workloads", name) }

// names lists dir's *.json files of fsys without the suffix, sorted.
func names(fsys embed.FS, dir string) []string {
	entries, _ := fs.ReadDir(fsys, dir) // cannot fail on an embedded directory
	var out []string
	for _, e := range entries {
		if name, ok := strings.CutSuffix(e.Name(), ".json"); ok {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

// read returns dir/name.json of fsys; a name with a path separator is none.
func read(fsys embed.FS, dir, name string) ([]byte, bool) {
	if name == "" || strings.ContainsAny(name, "/\\") {
		return nil, false
	}
	b, err := fsys.ReadFile(path.Join(dir, name+".json"))
	if err != nil {
		return nil, false
	}
	return b, true
}
