package pgstore

import "context"

// SessionSetting reads a setting as one of s's pooled sessions sees it.
func (s *Store) SessionSetting(ctx context.Context, name string) (string, error) {
	var v string
	err := s.pool.QueryRow(ctx, "SELECT current_setting($1)", name).Scan(&v)
	return v, err
}
