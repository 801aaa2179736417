package endpoint

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/kvelect/election"
	"github.com/nats-io/nats.go/micro"
)

// MethodHeader is the request header that names the HTTP method Forward
// uses (any case of its name): GET, HEAD, POST, PUT, PATCH, DELETE or
// OPTIONS; POST without it.
const MethodHeader = "Http-Method"

// MaxResponseBytes bounds the body of an application's response that
// Forward reads: a larger one is an error reply (502). A reply must also
// fit the server's max_payload (1 MB by default), or the requester gets an
// error reply (500) saying it could not be sent.
const MaxResponseBytes = 8 << 20

// forwardMethods are the methods MethodHeader may name.
var forwardMethods = []string{http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete, http.MethodOptions}

// notForwarded are the headers Forward does not pass on, either way: those
// of one connection, and the token, which only the leader sets.
var notForwarded = map[string]bool{
	"Connection": true, "Keep-Alive": true, "Proxy-Connection": true, "Te": true, "Trailer": true,
	"Transfer-Encoding": true, "Upgrade": true, "Host": true, "Content-Length": true,
	http.CanonicalHeaderKey(election.TokenHeader): true, http.CanonicalHeaderKey(MethodHeader): true,
}

// CheckURL returns an error if target cannot be Forward's target: an
// absolute http or https URL with a host. The error shows the URL without
// its user information, query or fragment.
func CheckURL(target string) error {
	_, err := parseTarget(target)
	return err
}

func parseTarget(target string) (*url.URL, error) {
	u, err := url.Parse(target)
	if err != nil {
		// url.Parse quotes the whole URL, password and all: say less.
		var uerr *url.Error
		if errors.As(err, &uerr) {
			err = uerr.Err
		}
		return nil, fmt.Errorf("the URL does not parse: %v; want http://HOST[:PORT]/PATH or https://…", err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, fmt.Errorf("URL %s: the scheme must be http or https", shown(u))
	}
	if u.Host == "" {
		return nil, fmt.Errorf("URL %s has no host; want http://HOST[:PORT]/PATH", shown(u))
	}
	return u, nil
}

// shown is u as messages show it: without user information, query or
// fragment, any of which may hold a secret.
func shown(u *url.URL) string {
	v := url.URL{Scheme: u.Scheme, Host: u.Host, Path: u.Path}
	if v.Scheme == "" {
		return strconv.Quote(v.String())
	}
	return v.String()
}

// Forward returns a Handler that forwards each request to the HTTP
// application at target, an http or https URL: the request's data is the
// body of a POST (or of the method MethodHeader names), its headers are
// the HTTP request's, with the leadership's token in Fencing-Token (one the
// requester sent is dropped). The response's body is the reply's data and
// its headers the reply's; a status other than 2xx is a micro error reply
// whose code is the status (Nats-Service-Error-Code: 503) and whose
// description names it (Nats-Service-Error: HTTP 503 Service Unavailable),
// with the body as data. An application that cannot be reached is an
// error reply 502, naming the failure; the HTTP call ends at the
// leadership's work deadline. Errors and logs never show target's user
// information or query.
//
// client makes the calls; nil: one that follows no redirect (a 3xx is an
// error reply), so that the token goes to target alone.
func Forward(target string, client *http.Client) (Handler, error) {
	u, err := parseTarget(target)
	if err != nil {
		return nil, err
	}
	if client == nil {
		client = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	}
	where := shown(u)
	return func(ctx context.Context, req micro.Request) (Reply, error) {
		method, err := methodOf(req.Headers())
		if err != nil {
			return Reply{}, err
		}
		token, _ := election.TokenFromContext(ctx)
		hreq, err := http.NewRequestWithContext(ctx, method, target, bytes.NewReader(req.Data()))
		if err != nil {
			return Reply{}, &Error{Code: "500", Description: fmt.Sprintf("forwarding to %s: %v", where, err)}
		}
		for k, vs := range req.Headers() {
			if notForwarded[http.CanonicalHeaderKey(k)] {
				continue
			}
			for _, v := range vs {
				hreq.Header.Add(k, v)
			}
		}
		hreq.Header.Set(election.TokenHeader, strconv.FormatUint(token, 10))
		res, err := client.Do(hreq)
		if err != nil {
			return Reply{}, forwardError(ctx, method, where, err)
		}
		defer res.Body.Close()
		body, err := io.ReadAll(io.LimitReader(res.Body, MaxResponseBytes+1))
		if err != nil {
			return Reply{}, forwardError(ctx, method, where, err)
		}
		if len(body) > MaxResponseBytes {
			return Reply{}, &Error{Code: "502", Description: fmt.Sprintf("%s %s: the response is larger than %d bytes", method, where, MaxResponseBytes)}
		}
		headers := micro.Headers{}
		for k, vs := range res.Header {
			if !notForwarded[k] {
				headers[k] = vs
			}
		}
		if res.StatusCode < 200 || res.StatusCode > 299 {
			return Reply{}, &Error{Code: strconv.Itoa(res.StatusCode), Description: "HTTP " + res.Status, Data: body, Headers: headers}
		}
		return Reply{Data: body, Headers: headers}, nil
	}, nil
}

// methodOf returns the method MethodHeader names in headers, POST without
// it, or an error reply 400 for one Forward does not use.
func methodOf(headers micro.Headers) (string, error) {
	for k, vs := range headers {
		if !strings.EqualFold(k, MethodHeader) || len(vs) == 0 {
			continue
		}
		m := strings.ToUpper(strings.TrimSpace(vs[0]))
		for _, allowed := range forwardMethods {
			if m == allowed {
				return m, nil
			}
		}
		return "", &Error{Code: "400", Description: fmt.Sprintf("%s %q: want one of %s", MethodHeader, vs[0], strings.Join(forwardMethods, ", "))}
	}
	return http.MethodPost, nil
}

// forwardError is the error reply for a call to the application that
// failed: 504 at the work deadline, else 502. It names the failure
// without the URL that url.Error would quote.
func forwardError(ctx context.Context, method, where string, err error) error {
	if cause := context.Cause(ctx); cause != nil {
		return &Error{Code: "504", Description: fmt.Sprintf("%s %s: %v", method, where, cause)}
	}
	var uerr *url.Error
	if errors.As(err, &uerr) {
		err = uerr.Err
	}
	return &Error{Code: "502", Description: fmt.Sprintf("%s %s: %v", method, where, err)}
}
