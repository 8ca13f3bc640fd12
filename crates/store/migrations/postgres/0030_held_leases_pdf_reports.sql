-- Held leases and PDF reports (PostgreSQL). Kept in lockstep with migrations/sqlite/0030_held_leases_pdf_reports.sql.
--
-- A lease row of `scheduled_runs` can be held: `holder` names the instance that holds it and
-- `last_run_at` is when it last renewed. The holder keeps the lease by renewing it; another
-- instance takes it over only once it has gone unrenewed for the lease's time to live (the
-- alert engine's periodic tick: one instance per cluster, the same one while it lives, so its
-- walk through the rules continues where it stopped). Period leases leave `holder` empty.
ALTER TABLE scheduled_runs ADD COLUMN holder TEXT;

-- Reports may be written as PDF (`format` 'pdf'): the format checks of 0022 widened.
ALTER TABLE report_definitions DROP CONSTRAINT report_definitions_format_check;
ALTER TABLE report_definitions
    ADD CONSTRAINT report_definitions_format_check CHECK (format IN ('json', 'csv', 'pdf'));
ALTER TABLE report_runs DROP CONSTRAINT report_runs_format_check;
ALTER TABLE report_runs
    ADD CONSTRAINT report_runs_format_check CHECK (format IN ('json', 'csv', 'pdf'));
