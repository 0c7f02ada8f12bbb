package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/inboxkit/inboxkit/invoice"
	"github.com/inboxkit/inboxkit/invoice/invoicegolden"
)

const envLetterService = "INBOXKIT_LETTER_SERVICE"

// httpLetters is the LetterService of `inboxctl run --letter-service URL`:
// it POSTs invoicegolden.LetterRequest as JSON with the idempotency key in
// the Idempotency-Key header. 2xx is sent (200: the key was seen, nothing
// sent again); any other answer or no answer is a technical error, retried.
type httpLetters struct {
	url    string
	client *http.Client
}

func newHTTPLetters(url string) *httpLetters {
	return &httpLetters{url: url, client: &http.Client{Timeout: 30 * time.Second}}
}

func (h *httpLetters) Send(ctx context.Context, l invoice.Letter, key string) error {
	body, err := json.Marshal(invoicegolden.NewLetterRequest(l))
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, h.url, bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("letter service %s: %w", h.url, err)
	}
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	resp, err := h.client.Do(req)
	if err != nil {
		return fmt.Errorf("letter service: %w", err)
	}
	defer resp.Body.Close()
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("letter service %s answered %s: %s", h.url, resp.Status, strings.TrimSpace(string(msg)))
	}
	return nil
}
