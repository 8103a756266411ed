// Package gcsfusemetrics decides which of gcsfuse's own Prometheus series leave a pod, and in
// what shape. gcsfuse serves some hundred series per mount (every fs op's latency histogram,
// Go runtime internals...); a node with a hundred pods of two volumes each must not turn that
// into tens of thousands of series, and a sidecar (which a pod's user controls) must not be
// able to grow the node plugin's output. So both the sidecar, on what gcsfuse serves, and the
// node plugin, on what a sidecar serves, keep only the families listed here, of the listed
// type, with the listed labels: other labels are summed away, label values are checked, and
// each family keeps at most MaxSeriesPerFamily series per volume.
package gcsfusemetrics

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"google.golang.org/protobuf/proto"

	"github.com/gcsfuse-csi/gcsfuse-csi/internal/lazyre"
)

// Prefix starts the name of every gcsfuse series once it left gcsfuse: "fs_ops_count" is
// exported as "gcsfuse_fs_ops_count".
const Prefix = "gcsfuse_"

// Labels the sidecar adds to every series of a volume, and the node plugin then checks.
const (
	LabelVolume = "volume"
	LabelBucket = "bucket"
)

// MaxSeriesPerFamily bounds the series of one family of one volume. gcsfuse's own label
// values are enumerations (fs_op has ~25, gcs_method ~15); anything past this is not gcsfuse.
const MaxSeriesPerFamily = 64

// Family is one exported gcsfuse family: its type and the gcsfuse labels it keeps.
type Family struct {
	Type   dto.MetricType
	Labels []string
	Help   string
}

// Families are the exported families, by exported name (Prefix + gcsfuse's name). Latency
// histograms are summed over their op label: the per-op split of every bucket would be most
// of the series; the per-op counts are in the counters.
var Families = map[string]Family{
	Prefix + "fs_ops_count":                  {dto.MetricType_COUNTER, []string{"fs_op"}, "File system operations served by gcsfuse, by op."},
	Prefix + "fs_ops_error_count":            {dto.MetricType_COUNTER, []string{"fs_op", "fs_error_category"}, "File system operations that failed, by op and error category."},
	Prefix + "fs_ops_latencies":              {dto.MetricType_HISTOGRAM, nil, "Latency of file system operations in microseconds, all ops."},
	Prefix + "gcs_request_count":             {dto.MetricType_COUNTER, []string{"gcs_method"}, "Requests to GCS, by method."},
	Prefix + "gcs_request_latencies":         {dto.MetricType_HISTOGRAM, nil, "Latency of GCS requests in milliseconds, all methods."},
	Prefix + "gcs_retry_count":               {dto.MetricType_COUNTER, []string{"retry_error_category"}, "GCS requests retried, by error category."},
	Prefix + "gcs_read_bytes_count":          {dto.MetricType_COUNTER, nil, "Bytes read from GCS objects by the file system."},
	Prefix + "gcs_download_bytes_count":      {dto.MetricType_COUNTER, []string{"read_type"}, "Bytes downloaded from GCS, by read type."},
	Prefix + "gcs_read_count":                {dto.MetricType_COUNTER, []string{"read_type"}, "GCS object reads, by read type."},
	Prefix + "file_cache_read_count":         {dto.MetricType_COUNTER, []string{"cache_hit", "read_type"}, "Reads through the file cache, by hit and read type."},
	Prefix + "file_cache_read_bytes_count":   {dto.MetricType_COUNTER, []string{"read_type"}, "Bytes read from the file cache, by read type."},
	Prefix + "process_resident_memory_bytes": {dto.MetricType_GAUGE, nil, "Resident memory of the volume's gcsfuse process."},
	Prefix + "process_cpu_seconds_total":     {dto.MetricType_COUNTER, nil, "CPU time of the volume's gcsfuse process."},
}

// validValue is what a label value may look like: gcsfuse's enumerations, volume names
// (DNS labels) and bucket names (lower case, digits, '-', '_', '.', up to 222).
var validValue = lazyre.New(`^[A-Za-z0-9_.\-]{1,222}$`)

// Reduce returns the families of in that are listed in Families, renamed with rename (the
// sidecar adds Prefix to gcsfuse's names; the node plugin, reading a sidecar, keeps them), each
// series reduced to the family's labels plus keep (label values checked; a series with an
// invalid or missing one is dropped), series with the same labels merged, at most
// MaxSeriesPerFamily series per family. The output is sorted by name and labels.
func Reduce(in map[string]*dto.MetricFamily, rename func(string) string, keep ...string) []*dto.MetricFamily {
	var out []*dto.MetricFamily
	for name, mf := range in {
		name = rename(name)
		fam, ok := Families[name]
		if !ok || mf.GetType() != fam.Type {
			continue
		}
		labels := append(slices.Clone(keep), fam.Labels...)
		merged := map[string]*dto.Metric{}
		var order []string
		for _, m := range mf.GetMetric() {
			pairs, ok := project(m.GetLabel(), labels, len(keep))
			if !ok {
				continue
			}
			key := labelKey(pairs)
			if prev, ok := merged[key]; ok {
				add(prev, m, fam.Type)
				continue
			}
			if len(order) == MaxSeriesPerFamily {
				continue
			}
			c := &dto.Metric{Label: pairs}
			if !add(c, m, fam.Type) {
				continue
			}
			merged[key] = c
			order = append(order, key)
		}
		if len(order) == 0 {
			continue
		}
		slices.Sort(order)
		outMF := &dto.MetricFamily{Name: proto.String(name), Help: proto.String(fam.Help), Type: fam.Type.Enum()}
		for _, k := range order {
			outMF.Metric = append(outMF.Metric, merged[k])
		}
		out = append(out, outMF)
	}
	slices.SortFunc(out, func(a, b *dto.MetricFamily) int { return cmp.Compare(a.GetName(), b.GetName()) })
	return out
}

// project keeps the labels named in want, in that order. The first required ones must be
// present; the rest (gcsfuse's optional attributes) may be missing. Every value present
// must be valid.
func project(have []*dto.LabelPair, want []string, required int) ([]*dto.LabelPair, bool) {
	var out []*dto.LabelPair
	for i, name := range want {
		var val string
		found := false
		for _, lp := range have {
			if lp.GetName() == name {
				val, found = lp.GetValue(), true
				break
			}
		}
		if !found {
			if i < required {
				return nil, false
			}
			continue
		}
		if !validValue.MatchString(val) {
			return nil, false
		}
		out = append(out, &dto.LabelPair{Name: proto.String(name), Value: proto.String(val)})
	}
	return out, true
}

func labelKey(pairs []*dto.LabelPair) string {
	var b strings.Builder
	for _, p := range pairs {
		b.WriteString(p.GetName())
		b.WriteByte('=')
		b.WriteString(p.GetValue())
		b.WriteByte(0)
	}
	return b.String()
}

// add adds the value of src to dst (a fresh dst takes src's value), for one metric type. It
// reports false when src does not carry a value of that type.
func add(dst, src *dto.Metric, t dto.MetricType) bool {
	switch t {
	case dto.MetricType_COUNTER:
		if src.Counter == nil {
			return false
		}
		if dst.Counter == nil {
			dst.Counter = &dto.Counter{Value: proto.Float64(0)}
		}
		dst.Counter.Value = proto.Float64(dst.Counter.GetValue() + src.Counter.GetValue())
	case dto.MetricType_GAUGE:
		if src.Gauge == nil {
			return false
		}
		if dst.Gauge == nil {
			dst.Gauge = &dto.Gauge{Value: proto.Float64(0)}
		}
		dst.Gauge.Value = proto.Float64(dst.Gauge.GetValue() + src.Gauge.GetValue())
	case dto.MetricType_HISTOGRAM:
		return addHistogram(dst, src.Histogram)
	default:
		return false
	}
	return true
}

func addHistogram(dst *dto.Metric, h *dto.Histogram) bool {
	if h == nil || len(h.GetBucket()) > 64 {
		return false
	}
	if dst.Histogram == nil {
		c := &dto.Histogram{SampleCount: proto.Uint64(0), SampleSum: proto.Float64(0)}
		for _, b := range h.GetBucket() {
			c.Bucket = append(c.Bucket, &dto.Bucket{UpperBound: proto.Float64(b.GetUpperBound()), CumulativeCount: proto.Uint64(0)})
		}
		dst.Histogram = c
	}
	d := dst.Histogram
	if len(d.Bucket) != len(h.GetBucket()) {
		return false // another bucket layout: not the same histogram
	}
	for i, b := range h.GetBucket() {
		if d.Bucket[i].GetUpperBound() != b.GetUpperBound() {
			return false
		}
	}
	for i, b := range h.GetBucket() {
		d.Bucket[i].CumulativeCount = proto.Uint64(d.Bucket[i].GetCumulativeCount() + b.GetCumulativeCount())
	}
	d.SampleCount = proto.Uint64(d.GetSampleCount() + h.GetSampleCount())
	d.SampleSum = proto.Float64(d.GetSampleSum() + h.GetSampleSum())
	return true
}

// MaxBytes bounds what is read of one metrics response: gcsfuse's whole output is ~30 KiB,
// a sidecar's reduced output of a few volumes a few KiB.
const MaxBytes = 1 << 20

// MaxFamilies bounds the families read from one response (gcsfuse serves ~60).
const MaxFamilies = 512

// Accept is what the sidecar and the node plugin ask for: delimited protobuf, several times
// cheaper to decode than text (the node plugin decodes every pod's at each scrape), text else.
const Accept = `application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;encoding=delimited;q=0.7,text/plain;version=0.0.4;q=0.3`

// Parse reads the Prometheus text format from r, at most MaxBytes (more is an error: not a
// gcsfuse or a sidecar).
func Parse(r io.Reader) (map[string]*dto.MetricFamily, error) {
	return Decode(r, expfmt.NewFormat(expfmt.TypeTextPlain))
}

// Decode reads format (delimited protobuf, else text) from r, at most MaxBytes and
// MaxFamilies.
func Decode(r io.Reader, format expfmt.Format) (map[string]*dto.MetricFamily, error) {
	lr := &io.LimitedReader{R: r, N: MaxBytes + 1}
	var mfs map[string]*dto.MetricFamily
	if format.FormatType() == expfmt.TypeProtoDelim {
		mfs = map[string]*dto.MetricFamily{}
		dec := expfmt.NewDecoder(lr, format)
		for {
			mf := &dto.MetricFamily{}
			err := dec.Decode(mf)
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				return nil, err
			}
			if len(mfs) == MaxFamilies {
				return nil, fmt.Errorf("metrics response has more than %d families", MaxFamilies)
			}
			if prev, ok := mfs[mf.GetName()]; ok {
				prev.Metric = append(prev.Metric, mf.Metric...)
				continue
			}
			mfs[mf.GetName()] = mf
		}
	} else {
		p := expfmt.NewTextParser(model.LegacyValidation)
		var err error
		if mfs, err = p.TextToMetricFamilies(lr); err != nil {
			return nil, err
		}
		if len(mfs) > MaxFamilies {
			return nil, fmt.Errorf("metrics response has more than %d families", MaxFamilies)
		}
	}
	if lr.N <= 0 {
		return nil, fmt.Errorf("metrics response exceeds %d bytes", MaxBytes)
	}
	return mfs, nil
}

// Write writes mfs in the Prometheus text format.
func Write(w io.Writer, mfs []*dto.MetricFamily) error {
	return Encode(w, expfmt.NewFormat(expfmt.TypeTextPlain), mfs)
}

// Encode writes mfs in format.
func Encode(w io.Writer, format expfmt.Format, mfs []*dto.MetricFamily) error {
	enc := expfmt.NewEncoder(w, format)
	for _, mf := range mfs {
		if err := enc.Encode(mf); err != nil {
			return err
		}
	}
	return nil
}

// Merge joins families of several sources (volumes, pods) by name, dropping empty ones: the
// text format allows one block per family. The output is sorted by name.
func Merge(sets [][]*dto.MetricFamily) []*dto.MetricFamily {
	byName := map[string]*dto.MetricFamily{}
	var out []*dto.MetricFamily
	for _, mfs := range sets {
		for _, mf := range mfs {
			if len(mf.Metric) == 0 {
				continue
			}
			if prev, ok := byName[mf.GetName()]; ok {
				prev.Metric = append(prev.Metric, mf.Metric...)
				continue
			}
			byName[mf.GetName()] = mf
			out = append(out, mf)
		}
	}
	slices.SortFunc(out, func(a, b *dto.MetricFamily) int { return cmp.Compare(a.GetName(), b.GetName()) })
	return out
}
