#!/bin/bash
cd /app
sqlite3 crm.db <<'SQL'
BEGIN;
CREATE TEMP TABLE ranked AS
  SELECT id, lower(trim(email)) AS k, name, phone,
         ROW_NUMBER() OVER (PARTITION BY lower(trim(email)) ORDER BY created_at, id) AS rn,
         COUNT(*) OVER (PARTITION BY lower(trim(email))) AS n
  FROM customers;
CREATE TEMP TABLE survivor AS
  SELECT r.id, r.k,
    (SELECT x.name FROM ranked x WHERE x.k = r.k AND COALESCE(x.name, '') <> '' ORDER BY x.rn LIMIT 1) AS name,
    (SELECT x.phone FROM ranked x WHERE x.k = r.k AND COALESCE(x.phone, '') <> '' ORDER BY x.rn LIMIT 1) AS phone
  FROM ranked r WHERE r.rn = 1 AND r.n > 1;
UPDATE orders SET customer_id = (
    SELECT s.id FROM ranked r JOIN survivor s ON s.k = r.k WHERE r.id = orders.customer_id)
  WHERE customer_id IN (SELECT id FROM ranked WHERE rn > 1);
DELETE FROM customers WHERE id IN (SELECT id FROM ranked WHERE rn > 1);
UPDATE customers SET
  email = (SELECT k FROM survivor s WHERE s.id = customers.id),
  name = (SELECT name FROM survivor s WHERE s.id = customers.id),
  phone = (SELECT phone FROM survivor s WHERE s.id = customers.id)
  WHERE id IN (SELECT id FROM survivor);
COMMIT;
SQL
