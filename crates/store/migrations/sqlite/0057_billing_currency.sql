-- An organization's billing currency (SQLite). Kept in lockstep with
-- migrations/postgres/0057_billing_currency.sql.
--
-- The ISO 4217 code its invoices, quotes and contracts are drafted in when a draft names none
-- (and that a billable period is assembled in); unset, every draft names its own.
ALTER TABLE organizations ADD COLUMN billing_currency TEXT;
