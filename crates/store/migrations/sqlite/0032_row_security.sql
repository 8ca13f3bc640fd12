-- Row-level security (PostgreSQL only; see migrations/postgres/0032_row_security.sql). SQLite
-- has none: there the code's `org_id` filters are the one wall. Kept so the trees stay in
-- lockstep.
SELECT 1;
