package main

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/llm-ring/llm-ring/internal/traffic"
)

// hostFile turns a path as a user types it (relative to the working
// directory, or absolute) into the file system and name that the core's
// loaders (traffic.LoadProfile, traffic.LoadTrace) read from: the core opens
// no file itself. A local path keeps its name, so that errors and the
// embedded profiles' fallback ("quick", "profiles/quick.json") see what the
// user wrote; any other path is read from the root of its volume.
func hostFile(p string) (fs.FS, string) {
	if filepath.IsLocal(p) {
		return os.DirFS("."), filepath.ToSlash(filepath.Clean(p))
	}
	abs, err := filepath.Abs(p)
	if err != nil {
		return os.DirFS("."), p // fs.ValidPath fails: the loader names the path
	}
	vol := filepath.VolumeName(abs)
	root := vol + string(filepath.Separator)
	return os.DirFS(root), filepath.ToSlash(strings.TrimPrefix(abs, root))
}

// loadProfile reads --profile: a file, or else a profile built into the binary.
func loadProfile(p string) (traffic.Profile, error) { return traffic.LoadProfile(hostFile(p)) }

// loadTrace reads --trace.
func loadTrace(p string) ([]traffic.TraceRequest, error) { return traffic.LoadTrace(hostFile(p)) }

func loadWorkload(p string) (traffic.Workload, error) { return traffic.LoadWorkload(hostFile(p)) }
