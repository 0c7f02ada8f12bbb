package golden

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// serveService starts the downstream service the processes call (see
// BlackBox: the HTTP service contract).
func (r *bbRun) serveService() error {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("golden: %w", err)
	}
	r.serviceURL = "http://" + ln.Addr().String() + "/" + r.bb.Service + "/"
	r.serviceRe = regexp.MustCompile(regexp.QuoteMeta(r.serviceURL) + `\d+`)
	r.srv = &http.Server{Handler: http.HandlerFunc(r.serve), ReadHeaderTimeout: 10 * time.Second}
	go r.srv.Serve(ln) //nolint:errcheck // ends with Close
	r.onClose(func() { r.srv.Close() })
	return nil
}

// serve is the downstream service.
func (r *bbRun) serve(w http.ResponseWriter, req *http.Request) {
	n, err := strconv.Atoi(strings.TrimPrefix(req.URL.Path, "/"+r.bb.Service+"/"))
	if req.Method != http.MethodPost || err != nil || n < 1 || n > r.sc.Instances {
		http.Error(w, "POST to the URL in "+ServiceEnv(r.bb.Service), http.StatusNotFound)
		return
	}
	body, err := io.ReadAll(io.LimitReader(req.Body, 1<<20))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	key := req.Header.Get("Idempotency-Key")
	summary := r.bb.SummaryFunc(body)

	r.mu.Lock()
	if r.hold > 0 {
		ch := r.holdCh
		r.arrived++
		if r.arrived >= r.hold {
			r.hold = 0
			close(ch)
		}
		r.mu.Unlock()
		select {
		case <-ch:
		case <-time.After(r.bb.HoldTimeout):
		case <-req.Context().Done():
		}
		r.mu.Lock()
	}
	c := r.svc.call(r.bb.Service, key, summary)
	if c.CallerDied {
		r.events = append(r.events, fmt.Sprintf("instance %d killed (kill -9) during call %d of %s, then started again", n, len(r.svc.calls), r.bb.Service))
		r.mu.Unlock()
		r.kill(n)
		if err := r.start(n); err != nil {
			r.mu.Lock()
			r.events = append(r.events, err.Error())
			r.mu.Unlock()
		}
		http.Error(w, "caller killed", http.StatusServiceUnavailable)
		return
	}
	r.mu.Unlock()
	w.WriteHeader(map[CallEffect]int{CallSent: http.StatusCreated, CallDuplicate: http.StatusOK, CallFailed: http.StatusServiceUnavailable}[c.Effect])
	fmt.Fprintln(w, c.Result)
}
