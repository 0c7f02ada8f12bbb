// Package observe makes a consumer visible to operators: Prometheus metrics,
// OpenTelemetry traces, the inbox table's gauges and health endpoints. It
// implements [consumer.Observer], so the consumer package itself imports
// neither Prometheus nor OpenTelemetry: a service that wants neither does
// not link them.
//
// # Wiring
//
//	obs, _ := observe.New(observe.Config{Consumer: "invoice-consumer", Store: store})
//	health := observe.NewHealth()
//	health.Add("database", store.CheckReady)
//	health.Add("broker", observe.SourceCheck(src)) // the adapter's connection state
//	go obs.RunInboxStats(ctx)                      // inbox gauges, every 15s
//	go http.ListenAndServe("127.0.0.1:9464", observe.Mux(obs, health))
//	c, _ := consumer.New(consumer.Config{..., Observer: obs,
//		DeadLetter: observe.TracePublisher(pub)})  // traceparent into dead letters
//
// # Metrics
//
// Counters (label consumer on all):
//
//	inboxkit_deliveries_total{outcome,action,status}  every settled delivery
//	inboxkit_duplicates_total                          deliveries of an event already seen
//	inboxkit_dead_letters_total{reason}                published to the DLQ, then acknowledged
//	inboxkit_rejections_total{reason}                  business rejections acknowledged
//	inboxkit_runtime_errors_total                      handed back: inbox, DLQ or broker unreachable
//
// Histograms: inboxkit_delivery_attempts (the inbox's attempt count at
// settlement), inboxkit_handler_duration_seconds, inboxkit_commit_duration_seconds
// (from the handler's return to the settlement: inbox commit, then the
// acknowledgement or publish), inboxkit_delivery_duration_seconds (receive to
// settlement), inboxkit_batch_size (deliveries per database transaction, for a
// consumer with BatchSize above 1). Gauge inboxkit_deliveries_in_flight.
//
// In store-then-process mode every stored entry a worker processed counts as
// a settled delivery too (outcome PROCESSED, REJECTED, RETRY or DEAD_LETTER),
// beside the receive's STORED or DUPLICATE.
//
// Inbox gauges, refreshed by [Observer.RunInboxStats] from one GROUP BY:
// inboxkit_inbox_rows{status}, inboxkit_inbox_oldest_nonterminal_age_seconds,
// inboxkit_inbox_rows_at_threshold, inboxkit_inbox_stats_errors_total.
// Purges report to inboxkit_purge_rows_total and inboxkit_purge_duration_seconds
// when run through [Observer.Purge] (or reported with [Observer.ObservePurge]);
// inboxctl purge, a one-shot command without a metrics endpoint, prints the
// rows and the duration instead.
//
// # Traces
//
// One span "inboxkit.delivery" (kind consumer) per delivery, a child of the
// W3C traceparent in the message headers when there is one, with the
// attributes event_id, correlation_id, outcome, action, status, reason and
// attempts; a child span "inboxkit.handler" around the handler.
// [TracePublisher] writes the delivery span's traceparent into dead-letter
// and rejection envelopes. Spans go to Config.TracerProvider (default: the
// global provider, a no-op unless otlp.Setup of package observe/otlp
// installed the OTLP exporter because OTEL_* variables are set).
//
// # Health
//
// [Health] answers /healthz (the process serves HTTP) and /readyz (every
// check passes and the consumer is not draining), with a JSON body naming
// each check. [SourceCheck] makes the broker check from the source's own
// connection state (consumer.Readier, which every adapter in broker/
// implements): not ready while the adapter reconnects, ready again once it
// has.
package observe
