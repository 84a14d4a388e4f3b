package experiment

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	pmodel "github.com/prometheus/common/model"
)

// MetricsPrefix selects the router's own series in its /metrics.
const MetricsPrefix = "llm_ring_"

// sample is one series value and whether it only grows (a counter, or a
// histogram's or summary's _count and _sum).
type sample struct {
	value      float64
	cumulative bool
}

// ParseMetrics reads Prometheus text exposition and returns the series whose
// name starts with prefix, keyed "name{label="value",…}" (labels sorted by
// name; no braces without labels). Histograms and summaries give their
// _count and _sum only.
func ParseMetrics(r io.Reader, prefix string) (map[string]float64, error) {
	s, err := parseSamples(r, prefix)
	if err != nil {
		return nil, err
	}
	out := make(map[string]float64, len(s))
	for k, v := range s {
		out[k] = v.value
	}
	return out, nil
}

func parseSamples(r io.Reader, prefix string) (map[string]sample, error) {
	p := expfmt.NewTextParser(pmodel.UTF8Validation)
	fams, err := p.TextToMetricFamilies(r)
	if err != nil {
		return nil, fmt.Errorf("parse metrics: %w", err)
	}
	out := map[string]sample{}
	for name, f := range fams {
		if !strings.HasPrefix(name, prefix) {
			continue
		}
		for _, m := range f.GetMetric() {
			labels := seriesLabels(m.GetLabel())
			switch f.GetType() {
			case dto.MetricType_COUNTER:
				out[name+labels] = sample{m.GetCounter().GetValue(), true}
			case dto.MetricType_GAUGE:
				out[name+labels] = sample{m.GetGauge().GetValue(), false}
			case dto.MetricType_HISTOGRAM:
				out[name+"_count"+labels] = sample{float64(m.GetHistogram().GetSampleCount()), true}
				out[name+"_sum"+labels] = sample{m.GetHistogram().GetSampleSum(), true}
			case dto.MetricType_SUMMARY:
				out[name+"_count"+labels] = sample{float64(m.GetSummary().GetSampleCount()), true}
				out[name+"_sum"+labels] = sample{m.GetSummary().GetSampleSum(), true}
			default:
				out[name+labels] = sample{m.GetUntyped().GetValue(), false}
			}
		}
	}
	return out, nil
}

func seriesLabels(ls []*dto.LabelPair) string {
	if len(ls) == 0 {
		return ""
	}
	pairs := make([]string, len(ls))
	for i, l := range ls {
		pairs[i] = l.GetName() + "=" + strconv.Quote(l.GetValue())
	}
	slices.Sort(pairs)
	return "{" + strings.Join(pairs, ",") + "}"
}

// metricsDelta returns the run's own metrics: for cumulative series, the end
// value minus the value at the run's start (an external router's counters
// span every run it served); for gauges, the end value.
func metricsDelta(before, after map[string]sample) map[string]float64 {
	out := make(map[string]float64, len(after))
	for k, v := range after {
		if v.cumulative {
			out[k] = v.value - before[k].value
		} else {
			out[k] = v.value
		}
	}
	return out
}

// scrape reads the router's GET /metrics (its llm_ring_* series).
func scrape(ctx context.Context, client *http.Client, base string) (map[string]sample, error) {
	return scrapePrefix(ctx, client, base, MetricsPrefix)
}

// scrapeAll reads the router's series from every instance and sums them
// (several active-active instances count a run's requests between them).
func scrapeAll(ctx context.Context, client *http.Client, bases []string) (map[string]sample, error) {
	sum := map[string]sample{}
	for _, base := range bases {
		s, err := scrape(ctx, client, base)
		if err != nil {
			if len(bases) > 1 {
				return nil, fmt.Errorf("%s: %w", base, err)
			}
			return nil, err
		}
		for k, v := range s {
			t := sum[k]
			t.value += v.value
			t.cumulative = t.cumulative || v.cumulative
			sum[k] = t
		}
	}
	return sum, nil
}

// scrapePrefix reads the series of base's GET /metrics whose names start with prefix.
func scrapePrefix(ctx context.Context, client *http.Client, base, prefix string) (map[string]sample, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("metrics: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return nil, fmt.Errorf("metrics: %s", statusError(resp.StatusCode, b))
	}
	return parseSamples(resp.Body, prefix)
}
