-- The AI assistant (PostgreSQL): chat sessions, their messages, the tool calls the model made
-- in them, token usage and cost per message, and each organization's budget. Kept in lockstep
-- with migrations/sqlite/0037_ai_assistant.sql.
--
-- A session is one person's, in one organization: every table carries `org_id` (row security
-- below) and links to its session by `(session_id, org_id)`, so no row can point across
-- organizations. Messages and executions go with their session when it is deleted; usage
-- stays, so deleting a chat never gives a budget back.

CREATE TABLE ai_sessions (
    id            UUID PRIMARY KEY,
    org_id        UUID NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
    user_id       UUID NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    status        TEXT NOT NULL CHECK (status IN ('active', 'closed', 'expired')),
    title         TEXT NOT NULL,
    -- What the page the chat was opened on showed (device, alert, overview, custom), as JSON.
    page_context  JSONB,
    created_at    TIMESTAMPTZ NOT NULL,
    -- The last message in either direction: idle sessions expire from it.
    last_active_at TIMESTAMPTZ NOT NULL,
    closed_at     TIMESTAMPTZ,
    UNIQUE (id, org_id)
);
CREATE INDEX ai_sessions_owner ON ai_sessions (org_id, user_id, last_active_at);

CREATE TABLE ai_messages (
    id           UUID PRIMARY KEY,
    org_id       UUID NOT NULL,
    session_id   UUID NOT NULL,
    -- Order within the session (timestamps can tie).
    seq          BIGINT NOT NULL,
    role         TEXT NOT NULL CHECK (role IN ('user', 'assistant', 'system', 'tool_use',
                                               'tool_result')),
    content      TEXT NOT NULL,
    -- tool_use / tool_result: the provider's id of the call and the tool's name.
    tool_use_id  TEXT,
    tool_name    TEXT,
    -- tool_use: the input; tool_result: the output handed to the model.
    payload      JSONB,
    is_error     BOOLEAN NOT NULL DEFAULT FALSE,
    created_at   TIMESTAMPTZ NOT NULL,
    UNIQUE (id, org_id),
    UNIQUE (session_id, seq),
    FOREIGN KEY (session_id, org_id) REFERENCES ai_sessions (id, org_id) ON DELETE CASCADE
);

CREATE TABLE ai_tool_executions (
    id           UUID PRIMARY KEY,
    org_id       UUID NOT NULL,
    session_id   UUID NOT NULL,
    tool_use_id  TEXT NOT NULL,
    tool_name    TEXT NOT NULL,
    input        JSONB NOT NULL,
    status       TEXT NOT NULL CHECK (status IN ('pending', 'approved', 'executing', 'completed',
                                                 'failed', 'rejected')),
    -- A Tier 3 call's one durable approval request (the same record an MCP call makes).
    approval_id  UUID REFERENCES approval_requests (id) ON DELETE SET NULL,
    output       JSONB,
    error        TEXT,
    created_at   TIMESTAMPTZ NOT NULL,
    completed_at TIMESTAMPTZ,
    FOREIGN KEY (session_id, org_id) REFERENCES ai_sessions (id, org_id) ON DELETE CASCADE
);
CREATE INDEX ai_tool_executions_session ON ai_tool_executions (org_id, session_id, created_at);

CREATE TABLE ai_usage (
    id            UUID PRIMARY KEY,
    org_id        UUID NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
    -- The session and assistant message it was spent on, without a foreign key: spending
    -- outlives a deleted session, so deleting a chat never gives a budget back.
    session_id    UUID NOT NULL,
    message_id    UUID NOT NULL,
    user_id       UUID NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    model         TEXT NOT NULL,
    input_tokens  BIGINT NOT NULL CHECK (input_tokens >= 0),
    output_tokens BIGINT NOT NULL CHECK (output_tokens >= 0),
    -- In millionths of a cent (tokens × cents per million tokens, exact); NULL when the
    -- model's price is unknown — never recorded as zero.
    cost_micro_cents BIGINT,
    created_at    TIMESTAMPTZ NOT NULL
);
CREATE INDEX ai_usage_org ON ai_usage (org_id, created_at);

CREATE TABLE ai_budgets (
    org_id        UUID PRIMARY KEY REFERENCES organizations (id) ON DELETE CASCADE,
    -- NULL: no limit of that kind.
    daily_cents   BIGINT CHECK (daily_cents >= 0),
    monthly_cents BIGINT CHECK (monthly_cents >= 0),
    updated_at    TIMESTAMPTZ NOT NULL
);

-- A Tier 3 call made in a chat: the session the assistant acted in, so the approved call is
-- released as that session's caller (its person, as they stand now).
ALTER TABLE approval_requests ADD COLUMN ai_session_id UUID REFERENCES ai_sessions (id)
    ON DELETE SET NULL;

-- Row security, as 0032 gave every earlier table with an `org_id`.
DO $$
DECLARE t regclass;
BEGIN
    FOREACH t IN ARRAY ARRAY['ai_sessions', 'ai_messages', 'ai_tool_executions', 'ai_usage',
                             'ai_budgets']::regclass[] LOOP
        EXECUTE format('ALTER TABLE %s ENABLE ROW LEVEL SECURITY', t);
        EXECUTE format('ALTER TABLE %s FORCE ROW LEVEL SECURITY', t);
        EXECUTE format(
            'CREATE POLICY org_wall ON %s '
            'USING (current_setting(''breeze.scope'', true) IN (''system'', org_id::text))',
            t);
    END LOOP;
END $$;
