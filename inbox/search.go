package inbox

import "context"

// ByOrderKey returns the rows whose ORDER_KEY is key (the business key
// consumer.Config.OrderKeyFunc derives; a key longer than
// MaxOrderKeyLength is stored hashed, so pass it as stored), of all
// consumers, oldest first (by CREATED_AT, then event id). A table read as
// it is without the column (ForReading, before migration step 7) has no
// such rows. Migration step 10's index (ORDER_KEY, CONSUMER_NAME, STATUS)
// serves it; before it the query reads the table.
func (s *Store) ByOrderKey(ctx context.Context, key string) ([]Record, error) {
	if s.missing["ORDER_KEY"] {
		return nil, nil
	}
	return s.query(ctx, s.d.Rebind(`SELECT `+s.recordColumns()+` FROM `+s.cfg.Table+` WHERE ORDER_KEY = ? ORDER BY CREATED_AT, EVENT_ID`), key)
}
