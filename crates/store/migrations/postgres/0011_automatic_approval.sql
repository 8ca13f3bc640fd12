-- Automatic approval (PostgreSQL). Kept in lockstep with
-- migrations/sqlite/0010_automatic_approval.sql.
--
-- An organization may let its policy approve a read-only Tier 3 action (e.g.
-- `execute_command.list_processes`) at once: mode `automatic`, on the policy and on the
-- requests it approved (which keep `decided_by` empty and name the policy in `reason`).
ALTER TABLE approval_requests DROP CONSTRAINT approval_requests_mode_check;
ALTER TABLE approval_requests ADD CONSTRAINT approval_requests_mode_check
    CHECK (mode IN ('supervised', 'four_eyes', 'automatic'));
ALTER TABLE approval_policies DROP CONSTRAINT approval_policies_mode_check;
ALTER TABLE approval_policies ADD CONSTRAINT approval_policies_mode_check
    CHECK (mode IN ('supervised', 'four_eyes', 'automatic'));
