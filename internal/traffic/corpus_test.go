package traffic

import (
	"math/rand/v2"
	"strings"
	"testing"
)

// TestSentenceWordCount: writer.sentence counts words as spaces + 1, which
// holds only for single-spaced templates and list items; check every one.
func TestSentenceWordCount(t *testing.T) {
	lists := map[string][]string{
		"docSentences": docSentences[:], "docIntros": docIntros[:], "docQuestions": docQuestions[:],
		"questions": questions[:], "contexts": contexts[:], "followUps": followUps[:],
	}
	r := rand.New(rand.NewPCG(1, 2))
	for name, list := range lists {
		for _, tmpl := range list {
			for d := range domains {
				for range 5 {
					w := writer{r: r, d: &domains[d]}
					got := w.sentence(tmpl)
					if want := len(strings.Fields(string(w.b))); got != want || w.words != want {
						t.Fatalf("%s %q rendered %q: counted %d words, want %d", name, tmpl, w.b, got, want)
					}
				}
			}
		}
	}
}
