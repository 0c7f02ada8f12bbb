package main

import (
	"fmt"
	"reflect"

	"github.com/inboxkit/inboxkit/consumer"
)

// setBatchSize sets consumer.Config.BatchSize by name, so this command
// builds against versions of the library before and after batch mode.
func setBatchSize(cfg *consumer.Config, n int) error {
	f := reflect.ValueOf(cfg).Elem().FieldByName("BatchSize")
	if !f.IsValid() || f.Kind() != reflect.Int {
		return fmt.Errorf("batch %d: consumer.Config has no BatchSize in this version of inboxkit", n)
	}
	f.SetInt(int64(n))
	return nil
}
