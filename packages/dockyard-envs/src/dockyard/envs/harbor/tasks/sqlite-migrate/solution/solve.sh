#!/bin/bash
cd /app
sqlite3 app.db <<'SQL'
BEGIN;
ALTER TABLE users ADD COLUMN order_count INTEGER NOT NULL DEFAULT 0;
ALTER TABLE users ADD COLUMN last_order_at TEXT;
ALTER TABLE users ADD COLUMN lifetime_cents INTEGER NOT NULL DEFAULT 0;
UPDATE users SET
  order_count = (SELECT COUNT(*) FROM orders o WHERE o.user_id = users.id AND o.status <> 'cancelled'),
  last_order_at = (SELECT MAX(placed_at) FROM orders o WHERE o.user_id = users.id AND o.status <> 'cancelled'),
  lifetime_cents = (SELECT COALESCE(SUM(total_cents), 0) FROM orders o
                    WHERE o.user_id = users.id AND o.status IN ('paid', 'shipped'));
CREATE INDEX idx_orders_user_placed ON orders(user_id, placed_at);
PRAGMA user_version = 2;
COMMIT;
SQL
