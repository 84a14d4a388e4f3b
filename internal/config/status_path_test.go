package config

import (
	"strings"
	"testing"
)

// TestStatusPage: admin.status_path places the status page and its data
// (status.json beside it, where the page's relative fetch goes); absent,
// the page is at "/".
func TestStatusPage(t *testing.T) {
	for _, tt := range []struct{ path, page, data string }{
		{"", "/", "/status.json"},
		{"/", "/", "/status.json"},
		{"/status", "/status", "/status.json"},
		{"/ops/", "/ops/", "/ops/status.json"},
		{"/ops/board", "/ops/board", "/ops/status.json"},
	} {
		page, data := Admin{StatusPath: tt.path}.StatusPage()
		if page != tt.page || data != tt.data {
			t.Errorf("status_path %q: page %q data %q, want %q %q", tt.path, page, data, tt.page, tt.data)
		}
	}
}

// TestStatusPathFromYAML: the key is read from router.yaml, and a bad one
// stops with an error naming it.
func TestStatusPathFromYAML(t *testing.T) {
	ex := example(t)
	set := func(v string) string {
		return strings.Replace(ex, "admin:\n", "admin:\n  status_path: "+v+"\n", 1)
	}
	c, err := Parse([]byte(set(`"/ops/"`)))
	if err != nil {
		t.Fatal(err)
	}
	if page, data := c.Admin.StatusPage(); page != "/ops/" || data != "/ops/status.json" {
		t.Errorf("page %q data %q", page, data)
	}
	c, err = Parse([]byte(ex))
	if err != nil {
		t.Fatal(err)
	}
	if page, _ := c.Admin.StatusPage(); page != "/" {
		t.Errorf("default page %q, want /", page)
	}
	for v, want := range map[string]string{
		`status`:             "must start with /",
		`"/a?b=1"`:           "must be a plain URL path",
		`"/a%20b"`:           "must be a plain URL path",
		`"/a//b"`:            "must be a clean path",
		`"/a/../b"`:          "must be a clean path",
		`"/admin/status"`:    "must not be under /admin/",
		`"/admin"`:           "must not be under /admin/",
		`"/status.json"`:     "must not name the page's own data file",
		`"/ops/status.json"`: "must not name the page's own data file",
		`["/"]`:              "admin.status_path",
	} {
		_, err := Parse([]byte(set(v)))
		if err == nil || !strings.Contains(err.Error(), "admin.status_path") || !strings.Contains(err.Error(), want) {
			t.Errorf("status_path %s: error %v, want admin.status_path: …%s", v, err, want)
		}
	}
}
