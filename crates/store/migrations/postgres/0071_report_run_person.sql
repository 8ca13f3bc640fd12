-- The person a report run was asked for (PostgreSQL; kept in lockstep with
-- migrations/sqlite/0071_report_run_person.sql). `requested_by` names the credential that
-- asked (an API key, an OAuth grant, a session); a person holding several credentials is one
-- requester for the per-requester cap on kept runs. Earlier runs have none and are counted by
-- their credential, as before.
ALTER TABLE report_runs ADD COLUMN requester_user_id uuid;
