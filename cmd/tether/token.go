package main

import (
	"errors"
	"fmt"
	"time"

	"github.com/tether-dev/tether/gateway"
)

func (m *Main) token(args []string) error {
	fs := m.newFlags("token")
	user := fs.String("user", "", "user id (the token's sub), required")
	secret := fs.String("secret", "", "HS256 secret [TETHER_JWT_SECRET]")
	fs.bind("secret", "TETHER_JWT_SECRET")
	ttl := fs.Duration("ttl", time.Hour, "how long the token is valid")
	authAge := fs.Duration("auth-age", 0, "how long ago the user logged in (auth_time = now - this); negative omits auth_time")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *user == "" {
		return errors.New("token: --user is required")
	}
	if *secret == "" {
		return errors.New("token: --secret or TETHER_JWT_SECRET is required")
	}
	tok, err := gateway.Issue([]byte(*secret), gateway.TokenSpec{User: *user, TTL: *ttl, AuthAge: *authAge}, time.Now())
	if err != nil {
		return fmt.Errorf("token: %w", err)
	}
	fmt.Fprintln(m.Stdout, tok)
	return nil
}
