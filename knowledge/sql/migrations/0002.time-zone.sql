-- Each user's time zone, chosen with /timezone (NULL: the operator's default).
-- depends: 0001.server-schema

ALTER TABLE user_settings ADD COLUMN time_zone TEXT;
