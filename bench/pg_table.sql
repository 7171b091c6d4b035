-- The postgres benchmark's table (bench/run postgres): `psql -v rows=N -f bench/pg_table.sql`.
-- Ten columns of mixed types, deterministic values, some NULLs; the primary key is added after
-- the load, and VACUUM ANALYZE leaves every page all-visible, so no reader sets hint bits.
-- Prints the table's size with its index (pg_total_relation_size), in bytes.
SET client_min_messages = warning;
DROP TABLE IF EXISTS bench;
CREATE TABLE bench (
  id          int8 NOT NULL,
  customer_id int4 NOT NULL,
  quantity    int4,
  sku         int8 NOT NULL,
  amount      float8,
  price       numeric(12,2) NOT NULL,
  note        text,
  created_at  timestamptz NOT NULL,
  active      bool NOT NULL,
  day         date NOT NULL
);
INSERT INTO bench
SELECT g,
       (g % 100003)::int4,
       CASE WHEN g % 50 = 0 THEN NULL ELSE (g % 97)::int4 END,
       (g * 7919) % 1000000007,
       CASE WHEN g % 40 = 0 THEN NULL ELSE (g % 100000) / 7.0::float8 END,
       ((g * 37) % 10000000) / 100.0,
       -- 20 to 39 characters
       CASE WHEN g % 25 = 0 THEN NULL ELSE 'order note ' || substr(md5(g::text), 1, 9 + (g % 20)::int) END,
       timestamptz '2024-01-01 00:00:00+00' + g * interval '1 second',
       g % 3 = 0,
       date '2020-01-01' + (g % 3650)::int
FROM generate_series(1::int8, :rows) AS g;
ALTER TABLE bench ADD PRIMARY KEY (id);
VACUUM ANALYZE bench;
SELECT pg_total_relation_size('bench');
