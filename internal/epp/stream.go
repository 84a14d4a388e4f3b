package epp

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"

	procv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/llm-ring/llm-ring/internal/replicaset"
	"github.com/llm-ring/llm-ring/internal/router"
	"github.com/llm-ring/llm-ring/internal/wire"
)

// stream is one ext_proc stream: one HTTP request and its answer.
type stream struct {
	s   *Server
	srv extprocv3.ExternalProcessor_ProcessServer
	ctx context.Context

	reqMode, respMode procv3.ProcessingMode_BodySendMode
	observe           bool // observability mode: send nothing

	method, path string
	hdr          http.Header
	subset       []string
	hasSubset    bool
	body         []byte
	picked       bool // the destination was sent (or the request refused)
	fl           *router.Flight
	respOK       bool // the answer's status was 2xx
}

// errStop ends a stream after an immediate response.
var errStop = errors.New("stop")

func (st *stream) run() error {
	defer func() {
		if st.fl != nil {
			st.fl.Finish(st.ctx)
		}
	}()
	first := true
	for {
		req, err := st.srv.Recv()
		if err == io.EOF {
			st.endOfStream()
			return nil
		}
		if err != nil {
			if status.Code(err) == codes.Canceled || st.ctx.Err() != nil {
				return nil // the gateway went away (the client disconnected)
			}
			return err
		}
		if first {
			first = false
			st.reqMode, st.respMode = procv3.ProcessingMode_FULL_DUPLEX_STREAMED, procv3.ProcessingMode_FULL_DUPLEX_STREAMED
			if pc := req.GetProtocolConfig(); pc != nil {
				st.reqMode, st.respMode = pc.GetRequestBodyMode(), pc.GetResponseBodyMode()
			}
		}
		st.observe = req.GetObservabilityMode()
		if err := st.handle(req); err != nil {
			if errors.Is(err, errStop) {
				return nil
			}
			return err
		}
	}
}

// endOfStream: the gateway closed the stream cleanly. With no response
// body to follow (mode NONE), a 2xx answer has ended now.
func (st *stream) endOfStream() {
	if st.fl != nil && st.respOK && st.respMode == procv3.ProcessingMode_NONE {
		st.fl.ResponseBody(nil, true)
	}
}

func (st *stream) handle(req *extprocv3.ProcessingRequest) error {
	switch v := req.GetRequest().(type) {
	case *extprocv3.ProcessingRequest_RequestHeaders:
		return st.requestHeaders(req, v.RequestHeaders)
	case *extprocv3.ProcessingRequest_RequestBody:
		return st.requestBody(v.RequestBody)
	case *extprocv3.ProcessingRequest_RequestTrailers:
		if st.reqMode == procv3.ProcessingMode_FULL_DUPLEX_STREAMED && !st.picked {
			if err := st.pickAndRelease(false, true); err != nil {
				return err
			}
		}
		return st.send(trailersResponse(false))
	case *extprocv3.ProcessingRequest_ResponseHeaders:
		return st.responseHeaders(req, v.ResponseHeaders)
	case *extprocv3.ProcessingRequest_ResponseBody:
		return st.responseBody(v.ResponseBody)
	case *extprocv3.ProcessingRequest_ResponseTrailers:
		if st.fl != nil {
			st.fl.ResponseBody(nil, true)
		}
		return st.send(trailersResponse(true))
	}
	return status.Errorf(codes.InvalidArgument, "epp: a ProcessingRequest with no request, response, body or trailers")
}

func (st *stream) send(r *extprocv3.ProcessingResponse) error {
	if st.observe {
		return nil
	}
	return st.srv.Send(r)
}

func (st *stream) requestHeaders(req *extprocv3.ProcessingRequest, h *extprocv3.HttpHeaders) error {
	switch st.reqMode {
	case procv3.ProcessingMode_FULL_DUPLEX_STREAMED, procv3.ProcessingMode_BUFFERED, procv3.ProcessingMode_NONE:
	default:
		return status.Errorf(codes.InvalidArgument,
			"epp: request_body_mode %s is not supported; configure FULL_DUPLEX_STREAMED (request_trailer_mode SEND) or BUFFERED", st.reqMode)
	}
	st.method, st.path, _, st.hdr = headerMap(h.GetHeaders())
	st.subset, st.hasSubset = subsetHint(req.GetMetadataContext())
	if h.GetEndOfStream() || st.reqMode == procv3.ProcessingMode_NONE {
		return st.pickAndRelease(true, false)
	}
	if st.reqMode == procv3.ProcessingMode_BUFFERED {
		// Envoy waits for this answer before it sends the body: the
		// destination goes with the body's answer.
		return st.send(requestHeadersResponse(nil, nil))
	}
	return nil // FULL_DUPLEX_STREAMED: answered once the body is in
}

func (st *stream) requestBody(b *extprocv3.HttpBody) error {
	if st.picked {
		return status.Errorf(codes.FailedPrecondition, "epp: request body after the request ended")
	}
	if len(st.body)+len(b.GetBody()) > st.s.opts.MaxBody {
		return st.refuse(&router.FlightError{Status: http.StatusRequestEntityTooLarge, Type: wire.ErrTypeInvalidRequest,
			Msg: fmt.Sprintf("request body is larger than the endpoint picker's limit (%d bytes)", st.s.opts.MaxBody)}, nil, nil)
	}
	st.body = append(st.body, b.GetBody()...)
	if !b.GetEndOfStream() {
		if st.reqMode == procv3.ProcessingMode_BUFFERED {
			return status.Errorf(codes.InvalidArgument, "epp: BUFFERED request body without end_of_stream")
		}
		return nil
	}
	return st.pickAndRelease(false, false)
}

// pickAndRelease routes the buffered request and sends the destination,
// then (full duplex) the body back to Envoy. headersOnly: the request has
// no body and the answer goes to its headers; trailers: the request's
// trailers ended the body (its last piece does not end the stream).
func (st *stream) pickAndRelease(headersOnly, trailers bool) error {
	st.picked = true
	dest, err := st.pick()
	if err != nil {
		return st.refusal(err)
	}
	common := destinationCommon(dest)
	md := destinationMetadata(dest)
	switch {
	case headersOnly:
		return st.send(requestHeadersResponse(common, md))
	case st.reqMode == procv3.ProcessingMode_BUFFERED:
		return st.send(bodyResponse(false, &extprocv3.BodyResponse{Response: common}, md))
	}
	if err := st.send(requestHeadersResponse(common, md)); err != nil {
		return err
	}
	body := st.body
	for {
		n := min(len(body), maxChunk)
		if err := st.send(streamedBody(false, body[:n], n == len(body) && !trailers)); err != nil {
			return err
		}
		if body = body[n:]; len(body) == 0 {
			return nil
		}
	}
}

// refuse answers the request with an immediate response and ends the
// stream. hdr: the answer's headers beyond its content type (a shed
// request's Retry-After and reason).
func (st *stream) refuse(fe *router.FlightError, body []byte, hdr http.Header) error {
	st.s.refused.WithLabelValues(strconv.Itoa(fe.Status)).Inc()
	if body == nil {
		body = fe.Body()
	}
	if err := st.send(immediate(fe.Status, body, hdr)); err != nil {
		return err
	}
	return errStop
}

// refusal turns an error of the pick into its immediate response (a
// *router.ShedError or *router.FlightError), or errStop when admission
// says the client went away while the request waited (nothing to answer).
func (st *stream) refusal(err error) error {
	var se *router.ShedError
	var fe *router.FlightError
	switch {
	case errors.Is(err, router.ErrCancelled):
		return errStop
	case errors.As(err, &se):
		return st.refuse(&se.FlightError, se.Body(), se.Header)
	case errors.As(err, &fe):
		return st.refuse(fe, nil, nil)
	}
	return err
}

// pick parses the request as the proxy does, runs admission control (the
// proxy's: a saturated pool makes it wait here, bounded, before anything
// reaches a replica), routes it (within the subset hint) and returns the
// destination list.
func (st *stream) pick() (string, error) {
	rt := st.s.rt
	fl, err := rt.NewFlight(st.ctx, st.method, st.path, st.hdr, st.body)
	if err != nil {
		return "", err
	}
	st.fl = fl
	exclude, err := st.outsideSubset()
	if err != nil {
		return "", err
	}
	// Admission right before Route: a request let go from the queue counts
	// as pending until Route has charged it (or failed to).
	if st.method == http.MethodPost { // as the proxy admits what it proxies
		if err := fl.Admit(st.hdr); err != nil {
			return "", err
		}
	}
	if err := fl.Route(exclude...); err != nil {
		return "", err
	}
	eps := []string{endpoint(fl.Replica())}
	for _, r := range fl.Fallbacks(nil, st.s.opts.Fallbacks, exclude...) {
		eps = append(eps, endpoint(r))
	}
	return strings.Join(eps, ","), nil
}

// outsideSubset names the replicas the subset hint leaves out; a hint
// that leaves nothing is a 503 (GIE-004 §Endpoint Subset).
func (st *stream) outsideSubset() ([]string, error) {
	if !st.hasSubset {
		return nil, nil
	}
	var out []string
	in := 0
	for _, r := range st.s.rt.Table().Status().Replicas {
		if slices.Contains(st.subset, endpoint(r.Replica)) {
			in++
			continue
		}
		out = append(out, r.Name)
	}
	if in == 0 {
		return nil, &router.FlightError{Status: http.StatusServiceUnavailable, Type: wire.ErrTypeUnavailable,
			Msg: fmt.Sprintf("none of the %d endpoints of the subset hint is a replica of this pool", len(st.subset))}
	}
	return out, nil
}

func (st *stream) responseHeaders(req *extprocv3.ProcessingRequest, h *extprocv3.HttpHeaders) error {
	if st.fl == nil || !st.picked {
		return st.send(responseHeadersResponse())
	}
	_, _, code, hdr := headerMap(h.GetHeaders())
	if ep := served(req.GetMetadataContext()); ep != "" && ep != endpoint(st.fl.Replica()) {
		if name := st.replicaAt(ep); name != "" {
			st.fl.Served(name)
		} else {
			slog.Default().Debug("epp: served endpoint is not a replica of this pool", slog.String("endpoint", ep))
		}
	}
	length := int64(-1)
	if n, err := strconv.ParseInt(hdr.Get("content-length"), 10, 64); err == nil && n >= 0 {
		length = n
	}
	st.respOK = code/100 == 2
	st.fl.ResponseHeaders(code, hdr.Get("content-type"), length)
	if h.GetEndOfStream() {
		st.fl.ResponseBody(nil, true)
	}
	d := st.fl.Decision()
	return st.send(responseHeadersResponse(
		setHeader(router.HeaderRoutedTo, st.fl.Replica().Name),
		setHeader(router.HeaderRouteReason, d.Reason.String()),
		setHeader(router.HeaderEstPrompt, strconv.Itoa(st.fl.EstPrompt()))))
}

func (st *stream) responseBody(b *extprocv3.HttpBody) error {
	if st.fl != nil {
		st.fl.ResponseBody(b.GetBody(), b.GetEndOfStream())
	}
	if st.respMode == procv3.ProcessingMode_FULL_DUPLEX_STREAMED {
		return st.send(streamedBody(true, b.GetBody(), b.GetEndOfStream()))
	}
	return st.send(bodyResponse(true, &extprocv3.BodyResponse{}, nil))
}

// replicaAt names the replica at endpoint ep, or "".
func (st *stream) replicaAt(ep string) string {
	for _, r := range st.s.rt.Table().Status().Replicas {
		if endpoint(r.Replica) == ep {
			return r.Name
		}
	}
	return ""
}

// endpoint is a replica's ip:port (its URL's host and port; the scheme's
// default port when the URL has none).
func endpoint(r replicaset.Replica) string {
	u, err := url.Parse(r.URL)
	if err != nil {
		return r.URL
	}
	if u.Port() != "" {
		return u.Host
	}
	port := "80"
	if u.Scheme == "https" {
		port = "443"
	}
	return net.JoinHostPort(u.Hostname(), port)
}
