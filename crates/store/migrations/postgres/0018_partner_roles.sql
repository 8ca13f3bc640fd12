-- Partner-wide roles (PostgreSQL). Kept in lockstep with migrations/sqlite/0018_partner_roles.sql.
--
-- A partner-level user (users.org_id IS NULL) may hold one role across its partner: it then has
-- that role in every organization of the partner, present and future, except where it holds a
-- role of its own in an organization (user_org_roles), which wins there. This is a partner
-- admin. The store checks that the user is partner-level and the role is its partner's.
CREATE TABLE user_partner_roles (
    user_id     UUID PRIMARY KEY REFERENCES users (id) ON DELETE CASCADE,
    role_id     UUID NOT NULL REFERENCES roles (id),
    created_at  TIMESTAMPTZ NOT NULL
);
