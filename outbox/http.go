package outbox

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/inboxkit/inboxkit/classify"
)

// postHTTP POSTs m to its URL destination with the message id as
// Idempotency-Key, and reads the answer as a decision: 2xx is the confirm;
// 408, 409 (a request with the same key still in progress), 425, 429 and
// 5xx are technical failures, tried again (a Retry-After header sets the
// delay); any other answer, a redirect included, refuses the message for
// good (classify.Poison, reason HTTP_<status>): it is parked at once.
func postHTTP(ctx context.Context, client *http.Client, m Outgoing) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, m.Destination, bytes.NewReader(m.Body))
	if err != nil {
		return classify.Poison("BAD_DESTINATION", fmt.Errorf("outbox: POST %s: %w", DestinationLabel(m.Destination), err))
	}
	for k, v := range m.Headers {
		req.Header.Set(k, v)
	}
	if req.Header.Get("Content-Type") == "" {
		req.Header.Set("Content-Type", "application/octet-stream")
	}
	req.Header.Set(HeaderIdempotencyKey, m.ID)
	if m.CorrelationID != "" {
		req.Header.Set("X-Correlation-ID", m.CorrelationID)
	}
	if m.CauseEventID != "" {
		req.Header.Set("X-Causation-ID", m.CauseEventID)
	}
	resp, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("outbox: POST %s: %w", DestinationLabel(m.Destination), err)
	}
	defer resp.Body.Close()
	answer, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20)) // lets the connection be reused
	code := resp.StatusCode
	if code >= 200 && code < 300 {
		return nil
	}
	err = fmt.Errorf("outbox: POST %s: %s: %s", DestinationLabel(m.Destination), resp.Status, strings.TrimSpace(string(answer)))
	switch {
	case code == http.StatusRequestTimeout, code == http.StatusConflict, code == http.StatusTooEarly,
		code == http.StatusTooManyRequests, code >= 500:
		if d := retryAfter(resp.Header.Get("Retry-After")); d > 0 {
			return classify.RetryAfter(d, err)
		}
		return err
	case code >= 300 && code < 400:
		return classify.Poison("HTTP_"+strconv.Itoa(code), fmt.Errorf("%w (a redirect to %q: use the final URL as the destination)", err, resp.Header.Get("Location")))
	}
	return classify.Poison("HTTP_"+strconv.Itoa(code), err)
}

// retryAfter reads a Retry-After header: seconds, or an HTTP date.
func retryAfter(v string) time.Duration {
	if v == "" {
		return 0
	}
	if n, err := strconv.Atoi(v); err == nil && n > 0 {
		return time.Duration(n) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil {
		return time.Until(t)
	}
	return 0
}
