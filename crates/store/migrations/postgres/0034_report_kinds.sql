-- Patch and compliance reports (PostgreSQL). Kept in lockstep with
-- migrations/sqlite/0034_report_kinds.sql.
--
-- Reports may be of kind `patch_status` (each device's last patch scan) and
-- `compliance_status` (each device's status against each compliance policy): the kind checks
-- of 0022 widened.
ALTER TABLE report_definitions DROP CONSTRAINT report_definitions_kind_check;
ALTER TABLE report_definitions
    ADD CONSTRAINT report_definitions_kind_check CHECK (kind IN ('device_inventory',
        'alert_history', 'audit_activity', 'patch_status', 'compliance_status'));
ALTER TABLE report_runs DROP CONSTRAINT report_runs_kind_check;
ALTER TABLE report_runs
    ADD CONSTRAINT report_runs_kind_check CHECK (kind IN ('device_inventory',
        'alert_history', 'audit_activity', 'patch_status', 'compliance_status'));
