package inspect

import "context"

// PageQuery exposes the statement of a dead-letter page to the plan test.
func (s *SQL) PageQuery(ctx context.Context, f Filter, after int64, limit int) (string, []any, error) {
	subs, err := s.subscriptions(ctx)
	if err != nil {
		return "", nil, err
	}
	q, args, _ := s.deadSelect(f, subs, s.now(), after, 0, limit)
	return q, args, nil
}

// DeadCountsQuery exposes the per-queue dead-letter count statement.
func (s *SQL) DeadCountsQuery() string {
	q, _ := s.deadCountsQuery()
	return q
}
