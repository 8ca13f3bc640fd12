-- Package removals in the patch history (PostgreSQL). Kept in lockstep with
-- migrations/sqlite/0031_patch_history_removals.sql.
--
-- `patch_history` records removals too (`manage_patches` remove, a deployment's package
-- removal): one row per device and package with action 'remove', the version removed and what
-- the agent answered; no job. The action check of 0024 widened.
ALTER TABLE patch_history DROP CONSTRAINT patch_history_action_check;
ALTER TABLE patch_history
    ADD CONSTRAINT patch_history_action_check CHECK (action IN ('install', 'rollback', 'remove'));
