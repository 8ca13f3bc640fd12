-- The AI client an approval request came from, as the client named itself (MCP clientInfo),
-- for the person deciding. Kept in lockstep with migrations/postgres/0041_approval_client.sql.
ALTER TABLE approval_requests ADD COLUMN client_name TEXT;
