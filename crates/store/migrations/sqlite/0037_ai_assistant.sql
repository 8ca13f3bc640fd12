-- The AI assistant (SQLite): chat sessions, their messages, the tool calls the model made
-- in them, token usage and cost per message, and each organization's budget. Kept in lockstep
-- with migrations/postgres/0037_ai_assistant.sql.
--
-- A session is one person's, in one organization: every table carries `org_id` (row security
-- on PostgreSQL) and links to its session by `(session_id, org_id)`, so no row can point across
-- organizations. Messages and executions go with their session when it is deleted; usage
-- stays, so deleting a chat never gives a budget back.

CREATE TABLE ai_sessions (
    id            BLOB PRIMARY KEY,
    org_id        BLOB NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
    user_id       BLOB NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    status        TEXT NOT NULL CHECK (status IN ('active', 'closed', 'expired')),
    title         TEXT NOT NULL,
    -- What the page the chat was opened on showed (device, alert, overview, custom), as JSON.
    page_context  TEXT,
    created_at    TEXT NOT NULL,
    -- The last message in either direction: idle sessions expire from it.
    last_active_at TEXT NOT NULL,
    closed_at     TEXT,
    UNIQUE (id, org_id)
);
CREATE INDEX ai_sessions_owner ON ai_sessions (org_id, user_id, last_active_at);

CREATE TABLE ai_messages (
    id           BLOB PRIMARY KEY,
    org_id       BLOB NOT NULL,
    session_id   BLOB NOT NULL,
    -- Order within the session (timestamps can tie).
    seq          INTEGER NOT NULL,
    role         TEXT NOT NULL CHECK (role IN ('user', 'assistant', 'system', 'tool_use',
                                               'tool_result')),
    content      TEXT NOT NULL,
    -- tool_use / tool_result: the provider's id of the call and the tool's name.
    tool_use_id  TEXT,
    tool_name    TEXT,
    -- tool_use: the input; tool_result: the output handed to the model.
    payload      TEXT,
    is_error     INTEGER NOT NULL DEFAULT 0,
    created_at   TEXT NOT NULL,
    UNIQUE (id, org_id),
    UNIQUE (session_id, seq),
    FOREIGN KEY (session_id, org_id) REFERENCES ai_sessions (id, org_id) ON DELETE CASCADE
);

CREATE TABLE ai_tool_executions (
    id           BLOB PRIMARY KEY,
    org_id       BLOB NOT NULL,
    session_id   BLOB NOT NULL,
    tool_use_id  TEXT NOT NULL,
    tool_name    TEXT NOT NULL,
    input        TEXT NOT NULL,
    status       TEXT NOT NULL CHECK (status IN ('pending', 'approved', 'executing', 'completed',
                                                 'failed', 'rejected')),
    -- A Tier 3 call's one durable approval request (the same record an MCP call makes).
    approval_id  BLOB REFERENCES approval_requests (id) ON DELETE SET NULL,
    output       TEXT,
    error        TEXT,
    created_at   TEXT NOT NULL,
    completed_at TEXT,
    FOREIGN KEY (session_id, org_id) REFERENCES ai_sessions (id, org_id) ON DELETE CASCADE
);
CREATE INDEX ai_tool_executions_session ON ai_tool_executions (org_id, session_id, created_at);

CREATE TABLE ai_usage (
    id            BLOB PRIMARY KEY,
    org_id        BLOB NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
    -- The session and assistant message it was spent on, without a foreign key: spending
    -- outlives a deleted session, so deleting a chat never gives a budget back.
    session_id    BLOB NOT NULL,
    message_id    BLOB NOT NULL,
    user_id       BLOB NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    model         TEXT NOT NULL,
    input_tokens  INTEGER NOT NULL CHECK (input_tokens >= 0),
    output_tokens INTEGER NOT NULL CHECK (output_tokens >= 0),
    -- In millionths of a cent (tokens × cents per million tokens, exact); NULL when the
    -- model's price is unknown — never recorded as zero.
    cost_micro_cents INTEGER,
    created_at    TEXT NOT NULL
);
CREATE INDEX ai_usage_org ON ai_usage (org_id, created_at);

CREATE TABLE ai_budgets (
    org_id        BLOB PRIMARY KEY REFERENCES organizations (id) ON DELETE CASCADE,
    -- NULL: no limit of that kind.
    daily_cents   INTEGER CHECK (daily_cents >= 0),
    monthly_cents INTEGER CHECK (monthly_cents >= 0),
    updated_at    TEXT NOT NULL
);

-- A Tier 3 call made in a chat: the session the assistant acted in, so the approved call is
-- released as that session's caller (its person, as they stand now).
ALTER TABLE approval_requests ADD COLUMN ai_session_id BLOB REFERENCES ai_sessions (id)
    ON DELETE SET NULL;

-- (Row security is PostgreSQL's; on SQLite the store's `org_id` filters are the wall.)
