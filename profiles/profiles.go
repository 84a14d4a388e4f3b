// Package profiles carries the shipped traffic profiles (the *.json files of
// this directory) inside the binary, so "--profile quick" works anywhere.
// internal/traffic parses them; this package only holds the bytes.
package profiles

import (
	"embed"
	"io/fs"
	"slices"
	"strings"
)

//go:embed *.json
var files embed.FS // read-only

// Names returns the names of the embedded profiles (file names without
// ".json"), sorted.
func Names() []string {
	entries, _ := fs.ReadDir(files, ".") // cannot fail on an embed.FS root
	var names []string
	for _, e := range entries {
		if name, ok := strings.CutSuffix(e.Name(), ".json"); ok {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	return names
}

// Read returns the JSON of the embedded profile name ("quick", not
// "quick.json"), or false if there is none.
func Read(name string) ([]byte, bool) {
	if name == "" || strings.ContainsAny(name, "/\\") {
		return nil, false
	}
	b, err := files.ReadFile(name + ".json")
	if err != nil {
		return nil, false
	}
	return b, true
}

//go:embed workloads/*.json
var workloads embed.FS // read-only

// WorkloadNames returns the names of the embedded open-loop workloads
// (workloads/*.json without ".json"), sorted.
func WorkloadNames() []string {
	entries, _ := fs.ReadDir(workloads, "workloads") // cannot fail on an embedded directory
	var names []string
	for _, e := range entries {
		if name, ok := strings.CutSuffix(e.Name(), ".json"); ok {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	return names
}

// ReadWorkload returns the JSON of the embedded workload name, or false.
func ReadWorkload(name string) ([]byte, bool) {
	if name == "" || strings.ContainsAny(name, "/\\") {
		return nil, false
	}
	b, err := workloads.ReadFile("workloads/" + name + ".json")
	if err != nil {
		return nil, false
	}
	return b, true
}
