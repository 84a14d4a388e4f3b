package config

import (
	"path"
	"strings"
)

// statusData is the status page's data file, served beside the page: the
// page fetches it by this relative name.
const statusData = "status.json"

// StatusPage returns where the admin listener serves the status page and
// its data: the configured admin.status_path (default "/") and
// status.json in the same directory, the URL the page's relative fetch
// resolves to ("/" → "/status.json", "/ops/status" → "/ops/status.json",
// "/ops/" → "/ops/status.json").
func (a Admin) StatusPage() (page, data string) {
	page = a.StatusPath
	if page == "" {
		page = "/"
	}
	return page, page[:strings.LastIndexByte(page, '/')+1] + statusData
}

// checkStatusPath validates admin.status_path: an absolute, clean URL
// path, outside the admin API's own /admin/ routes, that is not its own
// data file.
func (a Admin) checkStatusPath(bad func(key, format string, args ...any)) {
	p := a.StatusPath
	if p == "" {
		return
	}
	const key = "admin.status_path"
	switch {
	case p[0] != '/':
		bad(key, "must start with /, got %q", p)
	case strings.ContainsAny(p, "?#% \t\r\n"):
		bad(key, "must be a plain URL path (no query, fragment, escapes or spaces), got %q", p)
	case cleanDir(p) != p:
		bad(key, "must be a clean path (no //, . or .. elements), got %q", p)
	case p == "/admin" || strings.HasPrefix(p, "/admin/"):
		bad(key, "must not be under /admin/ (the admin API's routes), got %q", p)
	case path.Base(p) == statusData && !strings.HasSuffix(p, "/"):
		bad(key, "must not name the page's own data file %s, got %q", statusData, p)
	}
}

// cleanDir is path.Clean keeping a trailing slash.
func cleanDir(p string) string {
	c := path.Clean(p)
	if strings.HasSuffix(p, "/") && c != "/" {
		c += "/"
	}
	return c
}
