-- Run once by the postgres image when its volume is new (docker-entrypoint-initdb.d).
-- Breeze connects as `breeze_app`: it owns the database (so it runs the migrations) but is
-- neither a superuser nor BYPASSRLS, so PostgreSQL's row-level security (the org_wall
-- policies, README: Deployment) holds for every statement it runs. The image's own user,
-- `breeze`, is a superuser and stays for administration.
CREATE ROLE breeze_app LOGIN NOSUPERUSER NOBYPASSRLS PASSWORD 'breeze';
ALTER DATABASE breeze OWNER TO breeze_app;
