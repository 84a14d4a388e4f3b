package epp

import (
	"net/http"
	"slices"
	"strconv"
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/types/known/structpb"
)

// The names the endpoint picker protocol fixes (GIE-004, docs/epp.md).
const (
	// HeaderDestination carries the picked endpoint and its fallbacks,
	// "ip:port,ip:port,…", to the data plane; the same value goes into the
	// dynamic metadata namespace MetadataLB under the same key.
	HeaderDestination = "x-gateway-destination-endpoint"
	// MetadataLB is the metadata namespace of the destination and of the
	// served endpoint.
	MetadataLB = "envoy.lb"
	// KeyServed is the endpoint that served the request, reported by the
	// data plane in the response's metadata_context under MetadataLB.
	KeyServed = "x-gateway-destination-endpoint-served"
	// MetadataSubset is the filter metadata namespace of the subset hint,
	// and KeySubset its key: the endpoints the pick must come from.
	MetadataSubset = "envoy.lb.subset_hint"
	KeySubset      = "x-gateway-destination-endpoint-subset"
)

// maxChunk bounds one streamed body piece sent back (Envoy's recommended
// ≤ 64 KiB per response chunk).
const maxChunk = 64 << 10

// headerMap converts Envoy's header list into pseudo-headers and an
// http.Header (the proxy's parser reads the latter).
func headerMap(hm *corev3.HeaderMap) (method, path string, status int, h http.Header) {
	h = http.Header{}
	for _, hv := range hm.GetHeaders() {
		v := hv.GetValue()
		if len(hv.GetRawValue()) > 0 {
			v = string(hv.GetRawValue())
		}
		switch k := strings.ToLower(hv.GetKey()); k {
		case ":method":
			method = v
		case ":path":
			path, _, _ = strings.Cut(v, "?")
		case ":status":
			status, _ = strconv.Atoi(v)
		default:
			if !strings.HasPrefix(k, ":") {
				h.Add(k, v)
			}
		}
	}
	return method, path, status, h
}

// subsetHint reads the subset hint from filter metadata: the endpoints, and
// whether the key was set at all (set and empty means nothing is eligible).
func subsetHint(md *corev3.Metadata) ([]string, bool) {
	ns, ok := md.GetFilterMetadata()[MetadataSubset]
	if !ok {
		return nil, false
	}
	v, ok := ns.GetFields()[KeySubset]
	if !ok {
		return nil, false
	}
	var out []string
	switch k := v.GetKind().(type) {
	case *structpb.Value_ListValue:
		for _, e := range k.ListValue.GetValues() {
			if s := strings.TrimSpace(e.GetStringValue()); s != "" {
				out = append(out, s)
			}
		}
	case *structpb.Value_StringValue: // tolerated: "ip:port,ip:port"
		for s := range strings.SplitSeq(k.StringValue, ",") {
			if s = strings.TrimSpace(s); s != "" {
				out = append(out, s)
			}
		}
	}
	return out, true
}

// served reads the served endpoint from a response's metadata context.
func served(md *corev3.Metadata) string {
	v := md.GetFilterMetadata()[MetadataLB].GetFields()[KeyServed]
	s := strings.TrimSpace(v.GetStringValue())
	first, _, _ := strings.Cut(s, ",") // a list is not expected; its first is the one
	return first
}

func setHeader(k, v string) *corev3.HeaderValueOption {
	return &corev3.HeaderValueOption{Header: &corev3.HeaderValue{Key: k, RawValue: []byte(v)}}
}

// destination is the pick's answer to the request headers (or, in
// BUFFERED mode, to the body): the header and the same value as dynamic
// metadata; the route is recomputed with the header set.
func destinationCommon(dest string, extra ...*corev3.HeaderValueOption) *extprocv3.CommonResponse {
	return &extprocv3.CommonResponse{
		ClearRouteCache: true,
		HeaderMutation:  &extprocv3.HeaderMutation{SetHeaders: append([]*corev3.HeaderValueOption{setHeader(HeaderDestination, dest)}, extra...)},
	}
}

func destinationMetadata(dest string) *structpb.Struct {
	return &structpb.Struct{Fields: map[string]*structpb.Value{
		MetadataLB: structpb.NewStructValue(&structpb.Struct{Fields: map[string]*structpb.Value{
			HeaderDestination: structpb.NewStringValue(dest),
		}}),
	}}
}

func requestHeadersResponse(c *extprocv3.CommonResponse, md *structpb.Struct) *extprocv3.ProcessingResponse {
	return &extprocv3.ProcessingResponse{
		Response:        &extprocv3.ProcessingResponse_RequestHeaders{RequestHeaders: &extprocv3.HeadersResponse{Response: c}},
		DynamicMetadata: md,
	}
}

func responseHeadersResponse(set ...*corev3.HeaderValueOption) *extprocv3.ProcessingResponse {
	var c *extprocv3.CommonResponse
	if len(set) > 0 {
		c = &extprocv3.CommonResponse{HeaderMutation: &extprocv3.HeaderMutation{SetHeaders: set}}
	}
	return &extprocv3.ProcessingResponse{
		Response: &extprocv3.ProcessingResponse_ResponseHeaders{ResponseHeaders: &extprocv3.HeadersResponse{Response: c}},
	}
}

// streamedBody answers a body piece in FULL_DUPLEX_STREAMED mode with the
// bytes to forward.
func streamedBody(response bool, p []byte, end bool) *extprocv3.ProcessingResponse {
	br := &extprocv3.BodyResponse{Response: &extprocv3.CommonResponse{BodyMutation: &extprocv3.BodyMutation{
		Mutation: &extprocv3.BodyMutation_StreamedResponse{StreamedResponse: &extprocv3.StreamedBodyResponse{Body: p, EndOfStream: end}},
	}}}
	return bodyResponse(response, br, nil)
}

func bodyResponse(response bool, br *extprocv3.BodyResponse, md *structpb.Struct) *extprocv3.ProcessingResponse {
	if response {
		return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseBody{ResponseBody: br}, DynamicMetadata: md}
	}
	return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestBody{RequestBody: br}, DynamicMetadata: md}
}

func trailersResponse(response bool) *extprocv3.ProcessingResponse {
	if response {
		return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseTrailers{ResponseTrailers: &extprocv3.TrailersResponse{}}}
	}
	return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestTrailers{RequestTrailers: &extprocv3.TrailersResponse{}}}
}

// immediate is the answer the gateway sends the client instead of
// forwarding the request: status, an OpenAI-style JSON body, and the
// headers in hdr (lower-cased, as HTTP/2 sends them; a content type in
// hdr replaces the default).
func immediate(status int, body []byte, hdr http.Header) *extprocv3.ProcessingResponse {
	set := []*corev3.HeaderValueOption{setHeader("content-type", "application/json")}
	keys := make([]string, 0, len(hdr))
	for k := range hdr {
		if !strings.EqualFold(k, "content-type") {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	for _, k := range keys {
		set = append(set, setHeader(strings.ToLower(k), hdr.Get(k)))
	}
	return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ImmediateResponse{ImmediateResponse: &extprocv3.ImmediateResponse{
		Status:  &typev3.HttpStatus{Code: typev3.StatusCode(status)},
		Headers: &extprocv3.HeaderMutation{SetHeaders: set},
		Body:    body,
		Details: "llm-ring-epp",
	}}}
}
