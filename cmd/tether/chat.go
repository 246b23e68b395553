package main

import (
	"context"
	"errors"
)

func (m *Main) chat(ctx context.Context, args []string) error {
	return errors.New("chat: not built yet")
}
