package admission

import "testing"

func TestRowTagRoundTrip(t *testing.T) {
	conv := "stage1@4/17.0"
	tag := RowTag{Priority: -10, Flow: "t3", WaitMS: 12.5}
	s := tag.Append(conv)
	if s != "stage1@4/17.0#band=-10#flow=t3#wait_ms=12.500" {
		t.Fatalf("tag %q", s)
	}
	base, got, ok := ParseRowTag(s)
	if !ok || base != conv || got != tag {
		t.Fatalf("parsed %q %+v %v", base, got, ok)
	}
	for _, bad := range []string{conv, conv + "#band=x#flow=a#wait_ms=1", conv + "#band=1#wait_ms=1"} {
		if b, _, ok := ParseRowTag(bad); ok || b != bad {
			t.Errorf("%q: parsed as tagged", bad)
		}
	}
}

func TestIsShed(t *testing.T) {
	msg := ShedPrefix + "deadline"
	for _, c := range []struct {
		status int
		err    string
		want   bool
	}{{429, msg, true}, {503, msg, true}, {503, "no ready replica to serve the request", false}, {503, "HTTP 503: " + msg, true}, {429, "", true}, {200, msg, false}} {
		if got := IsShed(c.status, c.err); got != c.want {
			t.Errorf("IsShed(%d, %q) = %v, want %v", c.status, c.err, got, c.want)
		}
	}
}
