-- The audit retention is one value for the whole cluster. Every instance used to store its own
-- BREEZE_AUDIT_RETENTION_DAYS daily, so two instances configured differently took turns (90,
-- 1, 90, forever…) and each purge used whichever had run last. Now the first instance settles
-- the row once (`settled`), later ones only read it (and warn when they were configured
-- otherwise), and only an explicit change (`breeze audit retention`) writes it again. A
-- retention an earlier Breeze stored stands. Kept in lockstep with
-- migrations/sqlite/0050_audit_retention_settled.sql.
ALTER TABLE audit_retention ADD COLUMN settled BOOLEAN NOT NULL DEFAULT FALSE;
UPDATE audit_retention SET settled = TRUE WHERE days IS NOT NULL;
