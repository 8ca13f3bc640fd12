-- OAuth 2.1 for MCP clients (PostgreSQL). Kept in lockstep with migrations/sqlite/0012_oauth.sql.
--
-- Clients are registered (DCR) or fetched client ID metadata documents (CIMD, cached here so
-- every instance shares one copy). An authorization code is stored as its SHA-256 only, bound
-- to client, redirect URI, PKCE challenge, resource, organization, user and scopes; exchanging
-- it stamps `used_at` and names the grant it created, so a replay can revoke that grant. A
-- grant is one user's consent for one client in one organization; its refresh tokens (SHA-256
-- only) form a chain through `parent_hash`: a token is `rotated_at` when its successor is
-- issued and `discarded_at` when a retry of its parent replaces it. Access tokens are signed
-- JWTs and not stored; they die with their grant's status.
CREATE TABLE oauth_clients (
    client_id     TEXT PRIMARY KEY CHECK (char_length(client_id) BETWEEN 1 AND 2048),
    kind          TEXT NOT NULL CHECK (kind IN ('dcr', 'cimd')),
    client_name   TEXT NOT NULL,
    redirect_uris JSONB NOT NULL,
    -- The registration response (DCR) or the validated document (CIMD).
    metadata      JSONB NOT NULL,
    created_at    TIMESTAMPTZ NOT NULL,
    last_used_at  TIMESTAMPTZ,
    -- DCR: removed by the stale-client sweep after this; CIMD: fetched again after this.
    expires_at    TIMESTAMPTZ NOT NULL
);
CREATE INDEX oauth_clients_expiry ON oauth_clients (expires_at);

CREATE TABLE oauth_grants (
    id            UUID PRIMARY KEY,
    org_id        UUID NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
    user_id       UUID NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    client_id     TEXT NOT NULL,
    client_name   TEXT NOT NULL,
    -- The granted OAuth scopes (`mcp:read`, …), as a JSON list.
    scopes        JSONB NOT NULL,
    resource      TEXT NOT NULL,
    status        TEXT NOT NULL CHECK (status IN ('active', 'revoked')),
    created_at    TIMESTAMPTZ NOT NULL,
    last_used_at  TIMESTAMPTZ,
    revoked_at    TIMESTAMPTZ,
    revoke_reason TEXT,
    CHECK ((status = 'revoked') = (revoked_at IS NOT NULL))
);
CREATE INDEX oauth_grants_user ON oauth_grants (user_id, created_at);
CREATE INDEX oauth_grants_org ON oauth_grants (org_id, created_at);

CREATE TABLE oauth_codes (
    code_hash      BYTEA PRIMARY KEY,
    client_id      TEXT NOT NULL,
    org_id         UUID NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
    user_id        UUID NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    redirect_uri   TEXT NOT NULL,
    code_challenge TEXT NOT NULL,
    resource       TEXT NOT NULL,
    scopes         JSONB NOT NULL,
    created_at     TIMESTAMPTZ NOT NULL,
    expires_at     TIMESTAMPTZ NOT NULL,
    used_at        TIMESTAMPTZ,
    grant_id       UUID REFERENCES oauth_grants (id) ON DELETE SET NULL
);
CREATE INDEX oauth_codes_expiry ON oauth_codes (expires_at);

CREATE TABLE oauth_refresh_tokens (
    token_hash   BYTEA PRIMARY KEY,
    grant_id     UUID NOT NULL REFERENCES oauth_grants (id) ON DELETE CASCADE,
    parent_hash  BYTEA,
    created_at   TIMESTAMPTZ NOT NULL,
    expires_at   TIMESTAMPTZ NOT NULL,
    rotated_at   TIMESTAMPTZ,
    discarded_at TIMESTAMPTZ
);
CREATE INDEX oauth_refresh_tokens_parent ON oauth_refresh_tokens (parent_hash);
CREATE INDEX oauth_refresh_tokens_grant ON oauth_refresh_tokens (grant_id);
