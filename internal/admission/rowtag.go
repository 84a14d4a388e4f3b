package admission

import (
	"strconv"
	"strings"
)

// RowTag is what a simulated request row carries about admission, appended
// to its conversation column (the record's CSV has no column for it, and
// the study's files must not change): "#band=P#flow=F#wait_ms=W". The
// simulator writes it, the analysis reads it back with ParseRowTag.
type RowTag struct {
	Priority int
	Flow     string
	WaitMS   float64 // time it waited in the router's queue (0: admitted at once, or shed)
}

// rowTagMark starts the tag; conversation ids never contain it.
const rowTagMark = "#band="

// Append returns conv with the tag appended. Flow names must not contain
// '#' (the simulator's are t0, t1, ...).
func (t RowTag) Append(conv string) string {
	return conv + rowTagMark + strconv.Itoa(t.Priority) + "#flow=" + t.Flow +
		"#wait_ms=" + strconv.FormatFloat(t.WaitMS, 'f', 3, 64)
}

// ParseRowTag splits a conversation column into the conversation and its
// tag; ok is false when it carries none (admission was off).
func ParseRowTag(conv string) (base string, t RowTag, ok bool) {
	base, rest, found := strings.Cut(conv, rowTagMark)
	if !found {
		return conv, RowTag{}, false
	}
	p, rest, f1 := strings.Cut(rest, "#flow=")
	fl, w, f2 := strings.Cut(rest, "#wait_ms=")
	prio, err1 := strconv.Atoi(p)
	wait, err2 := strconv.ParseFloat(w, 64)
	if !f1 || !f2 || err1 != nil || err2 != nil {
		return conv, RowTag{}, false
	}
	return base, RowTag{Priority: prio, Flow: fl, WaitMS: wait}, true
}

// ShedPrefix starts the error text of every request shed by admission, in
// the router's JSON error and in a simulated row's error column.
const ShedPrefix = "request shed by admission control: "

// IsShed reports whether a simulated request row (status, error text) was
// shed by admission: status 429 (the default shed status; the simulated
// replicas never answer it), or 503 (shed_status 503) with the shed error
// text (a 503 is also what a request gets when no replica can take it).
func IsShed(status int, errText string) bool {
	return status == 429 || status == 503 && strings.Contains(errText, ShedPrefix)
}
